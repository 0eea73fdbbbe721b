// ESM entry of the package `execbox`: the same API as index.cjs (which holds it).
import execbox from "./index.cjs";

export const { run, Sandbox, Policy, types, prompt, openapi, OpenApiProvider } = execbox;
export default execbox;
