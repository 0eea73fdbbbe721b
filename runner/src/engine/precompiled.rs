//! `bootstrap.js` compiled once per process to QuickJS bytecode, then loaded into each sandbox.
//!
//! Parsing the bootstrap costs most of a sandbox's set-up time; reading its bytecode costs
//! a small fraction of that. rquickjs exposes bytecode only for modules, so this module uses
//! the QuickJS C API directly; it is the runner's only raw FFI.

use std::ffi::CString;
use std::sync::OnceLock;

use rquickjs::{qjs, Context, Ctx, Runtime, Value};

const SOURCE: &str = include_str!("bootstrap.js");
const FILENAME: &str = "execbox-bootstrap.js";

/// The bootstrap's bytecode, compiled on first use.
fn bytecode() -> &'static [u8] {
    static BYTECODE: OnceLock<Vec<u8>> = OnceLock::new();
    BYTECODE.get_or_init(|| compile().expect("bootstrap.js compiles"))
}

fn compile() -> Result<Vec<u8>, String> {
    let runtime = Runtime::new().map_err(|e| e.to_string())?;
    let context = Context::full(&runtime).map_err(|e| e.to_string())?;
    let source = CString::new(SOURCE).map_err(|e| e.to_string())?;
    let filename = CString::new(FILENAME).map_err(|e| e.to_string())?;
    context.with(|ctx| {
        let raw = ctx.as_raw().as_ptr();
        let flags =
            qjs::JS_EVAL_TYPE_GLOBAL | qjs::JS_EVAL_FLAG_STRICT | qjs::JS_EVAL_FLAG_COMPILE_ONLY;
        // SAFETY: `raw` is the live context of `ctx`; `source` is NUL-terminated as JS_Eval
        // requires and outlives the call; the returned value is freed below in all paths.
        #[allow(unsafe_code)]
        unsafe {
            let function = qjs::JS_Eval(
                raw,
                source.as_ptr(),
                SOURCE.len() as _,
                filename.as_ptr(),
                flags as i32,
            );
            if qjs::JS_IsException(function) {
                let _ = ctx.catch();
                return Err("bootstrap.js does not compile".to_owned());
            }
            let mut len: qjs::size_t = 0;
            let buf =
                qjs::JS_WriteObject(raw, &mut len, function, qjs::JS_WRITE_OBJ_BYTECODE as i32);
            qjs::JS_FreeValue(raw, function);
            if buf.is_null() {
                let _ = ctx.catch();
                return Err("cannot serialise bootstrap.js".to_owned());
            }
            let bytes = std::slice::from_raw_parts(buf, len as usize).to_vec();
            qjs::js_free(raw, buf.cast());
            Ok(bytes)
        }
    })
}

/// Runs the bootstrap in `ctx` and returns what it evaluates to (its factory function).
pub(super) fn load<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Value<'js>> {
    let bytes = bytecode();
    let raw = ctx.as_raw().as_ptr();
    // SAFETY: `bytes` is bytecode this process wrote with the same QuickJS build;
    // JS_EvalFunction consumes the function object; the result's ownership passes to the
    // rquickjs `Value`, which frees it.
    #[allow(unsafe_code)]
    let value = unsafe {
        let function = qjs::JS_ReadObject(
            raw,
            bytes.as_ptr(),
            bytes.len() as _,
            qjs::JS_READ_OBJ_BYTECODE as i32,
        );
        if qjs::JS_IsException(function) {
            return Err(rquickjs::Error::Exception);
        }
        let result = qjs::JS_EvalFunction(raw, function);
        if qjs::JS_IsException(result) {
            return Err(rquickjs::Error::Exception);
        }
        Value::from_raw(ctx.clone(), result)
    };
    Ok(value)
}
