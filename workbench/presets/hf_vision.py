"""Parameters of the vision towers that ship inside multimodal ``config.json`` files (Gemma 3's SigLIP encoder,
Llama 4's vision model) and their projectors into the text model.

They are held in memory beside the decoder but run per image, not per text token, so the planner does not
price them; the model cards' totals include them for Llama 4 (109B) and leave them out for Gemma 3 (27B text,
"vision 0.4B"), so ``workbench show model`` prints both counts. Shapes follow transformers' modules
(``SiglipVisionModel``, ``Gemma3MultiModalProjector``, ``Llama4VisionModel``, ``Llama4MultiModalProjector``);
the ``[hf]`` oracle test checks each count against the meta-device model.
"""

from __future__ import annotations

from workbench.presets.hf_fields import ConfigReader


def _vision_reader(r: ConfigReader) -> ConfigReader:
    sub = r.cfg.get("vision_config")
    if not isinstance(sub, dict):
        raise ValueError(f"{r.origin}: field 'vision_config' must be an object, got {type(sub).__name__}")
    return ConfigReader(sub, f"{r.origin} vision_config")


def _biased_encoder_layers(h: int, inner: int, layers: int) -> int:
    """Pre-norm ViT blocks: q, k, v, o with biases, a biased two-layer MLP, two LayerNorms (weight + bias)."""
    return layers * (4 * (h * h + h) + (h * inner + inner + inner * h + h) + 4 * h)


def siglip_gemma3_parameters(r: ConfigReader, text_hidden_size: int) -> int:
    """SigLIP vision tower (patch convolution, learned positions, encoder, post LayerNorm, the attention-pooling
    head when ``vision_use_head``) plus Gemma 3's projector (``mm_input_projection_weight`` and its RMSNorm).
    Missing fields take SiglipVisionConfig's defaults (listed in the notes)."""
    v = _vision_reader(r)
    h, inner = v.int("hidden_size", default=768), v.int("intermediate_size", default=3072)
    layers, channels = v.int("num_hidden_layers", default=12), v.int("num_channels", default=3)
    patch, image = v.int("patch_size", default=16), v.int("image_size", default=224)
    total = channels * patch * patch * h + h + (image // patch) ** 2 * h
    total += _biased_encoder_layers(h, inner, layers) + 2 * h
    if v.bool("vision_use_head", True):
        total += h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * inner + inner + inner * h + h)
    r.notes.extend(v.notes)
    return total + h * text_hidden_size + h


def llama4_vision_parameters(r: ConfigReader, text_hidden_size: int) -> int:
    """Llama 4's vision model (unfolded patch projection, class embedding, learned positions, two LayerNorms,
    the encoder, the pixel-shuffle MLP adapter) plus the multimodal projector (``vision_output_dim`` x text
    hidden, no bias). Missing fields take Llama4VisionConfig's defaults (listed in the notes)."""
    v = _vision_reader(r)
    h, inner = v.int("hidden_size", default=768), v.int("intermediate_size", default=5632)
    layers, channels = v.int("num_hidden_layers", default=34), v.int("num_channels", default=3)
    patch, image = v.int("patch_size", default=14), v.int("image_size", default=448)
    proj_in, proj_out = (
        v.int("projector_input_dim", default=4096),
        v.int("projector_output_dim", default=4096),
    )
    out_dim = v.int("vision_output_dim", default=7680)
    total = channels * patch * patch * h + h + ((image // patch) ** 2 + 1) * h + 4 * h
    total += _biased_encoder_layers(h, inner, layers)
    total += inner * proj_in + proj_out * proj_out
    r.notes.extend(v.notes)
    return total + out_dim * text_hidden_size
