// The trusted half of the guest surface. Evaluated once per sandbox, before any guest code,
// in the sandbox's own context. It receives the native hooks as arguments (they are never
// globals), captures every intrinsic it uses before the guest can replace it, and returns
// the private functions the engine calls. Only `console` and the provider namespaces
// (installed later by `install`) become visible to the guest.
(function (emitLog, sendToolCall, globalObject) {
  "use strict";

  const ReflectApply = Reflect.apply;
  const ObjectDefineProperty = Object.defineProperty;
  const ObjectGetPrototypeOf = Object.getPrototypeOf;
  const ObjectKeys = Object.keys;
  const ObjectPrototype = Object.prototype;
  const ArrayIsArray = Array.isArray;
  const ArrayPrototype = Array.prototype;
  const NumberIsFinite = Number.isFinite;
  const JSONStringify = JSON.stringify;
  const JSONParse = JSON.parse;
  const StringCtor = String;
  const ErrorCtor = Error;
  const PromiseCtor = Promise;
  const PromiseResolve = Promise.resolve;
  const PromiseThen = Promise.prototype.then;
  const MapCtor = Map;
  const MapGet = Map.prototype.get;
  const MapSet = Map.prototype.set;
  const MapDelete = Map.prototype.delete;
  const SetCtor = Set;
  const SetAdd = Set.prototype.add;
  const SetHas = Set.prototype.has;
  const SetDelete = Set.prototype.delete;
  const WeakMapCtor = WeakMap;
  const WeakMapGet = WeakMap.prototype.get;
  const WeakMapSet = WeakMap.prototype.set;

  const MAX_DEPTH = 1000;
  const RESULT_NOT_SERIALIZABLE = "Guest code returned a non-serializable value";
  const INPUT_NOT_SERIALIZABLE = "Guest code passed a non-serializable tool input";

  // callId -> [resolve, reject] of the guest promise waiting for that call.
  const pending = new MapCtor();
  // Error objects this file created from trusted outcomes -> [code, message] at creation.
  // A WeakMap, not a property: the guest can neither read, copy nor forge the mark.
  const trusted = new WeakMapCtor();

  function define(target, key, value) {
    ObjectDefineProperty(target, key, {
      value: value,
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }

  function trustedError(code, message) {
    const error = new ErrorCtor(message);
    define(error, "code", code);
    ReflectApply(WeakMapSet, trusted, [error, [code, message]]);
    return error;
  }

  // ---- transport-safe serialization (result and tool input) ----

  function NotSerializable() {}

  // Returns JSON text, or undefined for a top-level undefined. Throws NotSerializable.
  function serialize(root) {
    if (root === undefined) return undefined;
    const ancestors = new SetCtor();
    function walk(value, depth) {
      switch (typeof value) {
        case "string":
          return JSONStringify(value);
        case "boolean":
          return value ? "true" : "false";
        case "number":
          if (!NumberIsFinite(value)) throw new NotSerializable();
          return JSONStringify(value);
        case "object":
          break;
        default:
          // bigint, symbol, function, undefined in a position that cannot drop it
          throw new NotSerializable();
      }
      if (value === null) return "null";
      if (depth >= MAX_DEPTH) throw new NotSerializable();
      if (ReflectApply(SetHas, ancestors, [value])) throw new NotSerializable();
      ReflectApply(SetAdd, ancestors, [value]);
      let out;
      if (ArrayIsArray(value)) {
        if (ObjectGetPrototypeOf(value) !== ArrayPrototype) throw new NotSerializable();
        const length = value.length;
        out = "[";
        for (let i = 0; i < length; i++) {
          if (i > 0) out += ",";
          const item = value[i];
          out += item === undefined ? "null" : walk(item, depth + 1);
        }
        out += "]";
      } else {
        const proto = ObjectGetPrototypeOf(value);
        if (proto !== ObjectPrototype && proto !== null) throw new NotSerializable();
        const keys = ObjectKeys(value);
        out = "{";
        let first = true;
        for (let i = 0; i < keys.length; i++) {
          const key = keys[i];
          const item = value[key];
          if (item === undefined) continue;
          if (!first) out += ",";
          first = false;
          out += JSONStringify(key) + ":" + walk(item, depth + 1);
        }
        out += "}";
      }
      ReflectApply(SetDelete, ancestors, [value]);
      return out;
    }
    return walk(root, 0);
  }

  // ---- console ----

  function formatValue(value) {
    if (typeof value === "string") return value;
    if (value === undefined) return "undefined";
    let text;
    try {
      text = JSONStringify(value);
    } catch (_) {
      return safeString(value);
    }
    if (text === undefined) return safeString(value);
    if (typeof value === "object" && value !== null) {
      let copy;
      try {
        copy = JSONParse(text);
      } catch (_) {
        return text;
      }
      if (typeof copy === "string") return copy; // toJSON gave a string, e.g. a Date
      if (typeof copy === "object" && copy !== null && !ArrayIsArray(copy)) {
        // Like the reference's dump: an Error's name, message and stack are shown.
        let added = false;
        const names = ["name", "message", "stack"];
        for (let i = 0; i < 3; i++) {
          const key = names[i];
          if (copy[key] === undefined) {
            let own;
            try {
              own = value[key];
            } catch (_) {
              own = undefined;
            }
            if (own !== undefined) {
              define(copy, key, own);
              added = true;
            }
          }
        }
        if (added) {
          try {
            return JSONStringify(copy);
          } catch (_) {
            return text;
          }
        }
      }
    }
    return text;
  }

  function safeString(value) {
    try {
      return StringCtor(value);
    } catch (_) {
      return "[unprintable value]";
    }
  }

  function makeLogger() {
    return function () {
      let line = "";
      for (let i = 0; i < arguments.length; i++) {
        if (i > 0) line += " ";
        line += formatValue(arguments[i]);
      }
      emitLog(line);
    };
  }

  const consoleObject = {
    log: makeLogger(),
    info: makeLogger(),
    warn: makeLogger(),
    error: makeLogger(),
  };
  ObjectDefineProperty(globalObject, "console", {
    value: consoleObject,
    writable: true,
    enumerable: false,
    configurable: true,
  });

  // ---- tools ----

  function makeTool(providerName, safeName) {
    return function (input) {
      let json;
      try {
        json = serialize(input);
      } catch (error) {
        if (!(error instanceof NotSerializable)) throw error;
        const rejected = trustedError("serialization_error", INPUT_NOT_SERIALIZABLE);
        return new PromiseCtor(function (_resolve, reject) {
          reject(rejected);
        });
      }
      const callId = sendToolCall(providerName, safeName, json);
      if (typeof callId !== "string") {
        // The execution is being torn down (cancelled or timed out): nothing is sent.
        const rejected = trustedError("timeout", "Execution timed out");
        return new PromiseCtor(function (_resolve, reject) {
          reject(rejected);
        });
      }
      return new PromiseCtor(function (resolve, reject) {
        ReflectApply(MapSet, pending, [callId, [resolve, reject]]);
      });
    };
  }

  // providers: [[name, [safeName, ...]], ...]
  function install(providers) {
    for (let p = 0; p < providers.length; p++) {
      const name = providers[p][0];
      const tools = providers[p][1];
      const namespace = {};
      for (let t = 0; t < tools.length; t++) {
        define(namespace, tools[t], makeTool(name, tools[t]));
      }
      ObjectDefineProperty(globalObject, name, {
        value: namespace,
        writable: true,
        enumerable: false,
        configurable: true,
      });
    }
  }

  // Settles a pending call: ok with a value, or failed with a trusted code and message.
  function settle(callId, ok, value, code, message) {
    const entry = ReflectApply(MapGet, pending, [callId]);
    if (entry === undefined) return false;
    ReflectApply(MapDelete, pending, [callId]);
    if (ok) entry[0](value);
    else entry[1](trustedError(code, message));
    return true;
  }

  // The final value: ["ok", json | undefined] or ["error", code, message].
  function finish(value) {
    try {
      return ["ok", serialize(value)];
    } catch (error) {
      if (!(error instanceof NotSerializable)) throw error;
      return ["error", "serialization_error", RESULT_NOT_SERIALIZABLE];
    }
  }

  // A rejection reason as [code, message]: trusted codes survive, everything else is runtime_error.
  function describe(reason) {
    const mark = typeof reason === "object" && reason !== null
      ? ReflectApply(WeakMapGet, trusted, [reason])
      : undefined;
    if (mark !== undefined) return [mark[0], mark[1]];
    let message;
    try {
      const candidate = reason !== null && reason !== undefined ? reason.message : undefined;
      message = typeof candidate === "string" ? candidate : safeString(reason);
    } catch (_) {
      message = safeString(reason);
    }
    return ["runtime_error", message];
  }

  // ---- the guest's own promise ----

  // undefined while the guest runs; then ["ok", json | undefined] or ["error", code, message].
  let outcome;

  function fail(reason) {
    const described = describe(reason);
    return ["error", described[0], described[1]];
  }

  function start(program) {
    outcome = undefined;
    let value;
    try {
      value = typeof program === "function" ? program() : program;
    } catch (error) {
      outcome = fail(error);
      return;
    }
    const promise = ReflectApply(PromiseResolve, PromiseCtor, [value]);
    ReflectApply(PromiseThen, promise, [
      function (result) {
        try {
          outcome = finish(result);
        } catch (error) {
          outcome = fail(error);
        }
      },
      function (reason) {
        outcome = fail(reason);
      },
    ]);
  }

  function poll() {
    return outcome;
  }

  return { install: install, settle: settle, describe: describe, start: start, poll: poll };
})
