// SVG files are bundled as their source text (the builder's `asset/source` rule for imports from JS).
declare module '*.svg' {
  const svgstr: string;
  export default svgstr;
}
