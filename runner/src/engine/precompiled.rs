//! `bootstrap.js` as QuickJS bytecode, loaded into each sandbox.
//!
//! Parsing the bootstrap costs most of a sandbox's set-up time; reading its bytecode costs
//! a small fraction of that. The bytecode ships with the runner (`bootstrap.qjsbc`), so a
//! runner process does not spend its first millisecond compiling it: the file records the
//! QuickJS version, the target's word size and byte order, and a hash of the `bootstrap.js`
//! it was compiled from, and is used only when all of them match this build; otherwise the
//! bootstrap is compiled once per process, as before. A unit test
//! (`shipped_bytecode_is_current`) fails when the file is stale; `BLESS=1` rewrites it.
//! rquickjs exposes bytecode only for modules, so this module uses the QuickJS C API
//! directly; it is the runner's only raw FFI.

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use rquickjs::{qjs, Context, Ctx, Runtime, Value};

const SOURCE: &str = include_str!("bootstrap.js");
const FILENAME: &str = "execbox-bootstrap.js";

/// The bytecode shipped with the runner: a [`header`], then what [`compile`] writes.
static SHIPPED: &[u8] = include_bytes!("bootstrap.qjsbc");

/// Where the shipped bytecode lives in the source tree (for `BLESS=1`).
#[cfg(test)]
const SHIPPED_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/engine/bootstrap.qjsbc");

/// The bootstrap's bytecode: the shipped one when it was compiled from this `bootstrap.js` by
/// this QuickJS for this kind of machine, otherwise compiled on first use.
fn bytecode() -> &'static [u8] {
    static BYTECODE: OnceLock<&'static [u8]> = OnceLock::new();
    BYTECODE.get_or_init(|| match SHIPPED.strip_prefix(header().as_slice()) {
        Some(bytecode) => bytecode,
        None => {
            tracing::debug!("bootstrap.qjsbc does not match this build; compiling bootstrap.js");
            Box::leak(compile().expect("bootstrap.js compiles").into_boxed_slice())
        }
    })
}

/// What the shipped bytecode must have been made by and from: a magic, the QuickJS version,
/// the word size and byte order, and a hash of `bootstrap.js`.
fn header() -> Vec<u8> {
    // SAFETY: JS_GetVersion returns a pointer to a static NUL-terminated string.
    #[allow(unsafe_code)]
    let version = unsafe { CStr::from_ptr(qjs::JS_GetVersion()) }.to_bytes();
    let mut header = b"execbox-bootstrap\0".to_vec();
    header.extend_from_slice(version);
    header.push(0);
    header.push(std::mem::size_of::<usize>() as u8);
    header.push(u8::from(cfg!(target_endian = "big")));
    header.extend_from_slice(&SOURCE_HASH.to_le_bytes());
    header
}

/// The hash of `bootstrap.js` in [`header`], computed at compile time.
const SOURCE_HASH: u64 = fnv1a(SOURCE.as_bytes());

/// FNV-1a, 64 bits: enough to tell one version of `bootstrap.js` from another.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
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
            let buf = qjs::JS_WriteObject(
                raw,
                &mut len,
                function,
                (qjs::JS_WRITE_OBJ_BYTECODE | qjs::JS_WRITE_OBJ_STRIP_SOURCE) as i32,
            );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_bytecode_is_current() {
        let mut fresh = header();
        fresh.extend_from_slice(&compile().unwrap());
        if std::env::var_os("BLESS").is_some() {
            std::fs::write(SHIPPED_PATH, &fresh).unwrap();
            return;
        }
        assert!(
            SHIPPED == fresh.as_slice(),
            "src/engine/bootstrap.qjsbc is not bootstrap.js compiled by this QuickJS: rewrite it \
             with `BLESS=1 cargo test --release -p execbox-runner --lib shipped_bytecode`"
        );
        assert_eq!(bytecode().as_ptr(), SHIPPED[header().len()..].as_ptr());
    }

    #[test]
    fn compiling_twice_gives_the_same_bytecode() {
        assert_eq!(compile().unwrap(), compile().unwrap());
    }
}
