// ESM entry of the package `execbox`: the same API as index.cjs (which holds it).
import execbox from "./index.cjs";

export const { run, Sandbox, Policy, types, prompt } = execbox;
export default execbox;
