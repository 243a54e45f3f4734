"""From a plan to a stack's own launch files, and from a real run's output back to the prediction.

``export``: a training ``Estimate`` -> the files that launch its plan on Megatron-Core, Megatron-Bridge,
torchtitan or DeepSpeed (``export_training``); ``serving``: a ``ServingPlan`` -> vLLM, SGLang, TensorRT-LLM or
Dynamo launch files (``export_serving``); ``runlogs``: what a real run prints, read back as measurements;
``compare``: measured beside predicted, and a row of the validation schema. Pure Python: the files are text.
"""
