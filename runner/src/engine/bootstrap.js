// The trusted half of the guest surface. Evaluated once per sandbox, before any guest code,
// in the sandbox's own context. It receives the native hooks as arguments (they are never
// globals), captures every intrinsic it uses before the guest can replace it, and returns
// the private functions the engine calls. Only `console` and the provider namespaces
// (installed later by `install`) become visible to the guest.
//
// Everything here runs with guest code able to interpose (getters, proxies, `toJSON`,
// `valueOf`), so this file is hostile territory: it never hands the guest a reference to
// anything of its own, builds descriptors and records without a prototype, and first cuts
// the only hook that could see its frames (see `sealStackTraceHooks`).
(function (emitLog, sendToolCall, globalObject, timeoutMessage) {
  "use strict";

  const ReflectApply = Reflect.apply;
  const ObjectDefineProperty = Object.defineProperty;
  const ObjectGetPrototypeOf = Object.getPrototypeOf;
  const ObjectSetPrototypeOf = Object.setPrototypeOf;
  const ReflectGet = Reflect.get;
  const ReflectHas = Reflect.has;
  const ProxyCtor = Proxy;
  const ObjectKeys = Object.keys;
  const ObjectPrototype = Object.prototype;
  const ArrayIsArray = Array.isArray;
  const ArrayPrototype = Array.prototype;
  const NumberIsFinite = Number.isFinite;
  const JSONStringify = JSON.stringify;
  const JSONParse = JSON.parse;
  const StringCtor = String;
  const StringToWellFormed = String.prototype.toWellFormed;
  const StringSlice = String.prototype.slice;
  const ErrorCtor = Error;
  const TypeErrorCtor = TypeError;
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

  // QuickJS implements V8's stack-trace API: `Error.prepareStackTrace` receives CallSite
  // objects whose `getFunction()` returns the function of every frame, this file's private
  // functions included, and `Error.stackTraceLimit` runs guest `valueOf` code inside every
  // error's construction. Both are accessors on `Error` that write engine-internal slots; the
  // slots keep their defaults (no hook, 10 frames) once the accessors are gone. Plain data
  // properties take their place, so guest code that sets them still runs, to no effect.
  function sealStackTraceHooks() {
    const names = ["prepareStackTrace", "stackTraceLimit"];
    const values = [undefined, 10];
    for (let i = 0; i < 2; i++) {
      ObjectDefineProperty(ErrorCtor, names[i], {
        __proto__: null,
        value: values[i],
        writable: true,
        enumerable: false,
        configurable: true,
      });
    }
  }
  sealStackTraceHooks();

  // Lone surrogates cannot cross the boundary as UTF-8: they become U+FFFD, in logs, tool
  // inputs and results alike.
  function wellFormed(text) {
    return ReflectApply(StringToWellFormed, text, []);
  }

  // callId -> [resolve, reject] of the guest promise waiting for that call.
  const pending = new MapCtor();
  // Error objects this file created from trusted outcomes -> [code, message, reason,
  // retryAfterMs, status] at creation. A WeakMap, not a property: the guest can neither read, copy
  // nor forge the mark.
  const trusted = new WeakMapCtor();

  function define(target, key, value) {
    ObjectDefineProperty(target, key, {
      __proto__: null,
      value: value,
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }

  // `reason` (a string), `retryAfterMs` and `status` (numbers) are optional, as on the wire.
  function trustedError(code, message, reason, retryAfterMs, status) {
    const error = new ErrorCtor(message);
    define(error, "code", code);
    if (typeof reason === "string") define(error, "reason", reason);
    else reason = undefined;
    if (typeof retryAfterMs === "number") define(error, "retryAfterMs", retryAfterMs);
    else retryAfterMs = undefined;
    if (typeof status === "number") define(error, "status", status);
    else status = undefined;
    ReflectApply(WeakMapSet, trusted, [error, [code, message, reason, retryAfterMs, status]]);
    return error;
  }

  // ---- transport-safe serialization (result and tool input) ----

  // Why a value cannot leave the sandbox: thrown by `serialize` as a record without a
  // prototype, marked by a private object so that nothing the guest throws passes for one.
  const NOT_SERIALIZABLE = {};
  function notSerializableValue(what, fix) {
    return { __proto__: null, mark: NOT_SERIALIZABLE, why: "is " + what + "; " + fix, path: "" };
  }
  function isNotSerializable(error) {
    return typeof error === "object" && error !== null && error.mark === NOT_SERIALIZABLE;
  }

  const DatePrototype = Date.prototype;
  const MapPrototype = Map.prototype;
  const SetPrototype = Set.prototype;
  const WeakMapPrototype = WeakMap.prototype;
  const WeakSetPrototype = WeakSet.prototype;
  const RegExpPrototype = RegExp.prototype;
  const PromisePrototype = Promise.prototype;
  const ErrorPrototype = Error.prototype;
  const ArrayBufferPrototype = ArrayBuffer.prototype;
  const TypedArrayPrototype = ObjectGetPrototypeOf(Uint8Array.prototype);
  const StringCharCodeAt = String.prototype.charCodeAt;

  function hasInChain(value, proto) {
    let p = value;
    for (let i = 0; i < 16 && p !== null; i++) {
      p = ObjectGetPrototypeOf(p);
      if (p === proto) return true;
    }
    return false;
  }

  // [what it is, how to fix it] for a value that cannot be serialized.
  function unsupported(value) {
    switch (typeof value) {
      case "bigint":
        return ["a BigInt", "convert it with String() or Number()"];
      case "symbol":
        return ["a Symbol", "use a string instead"];
      case "function":
        return ["a function", "functions cannot leave the sandbox; call it, or leave it out"];
      case "number":
        return [value !== value ? "NaN" : value > 0 ? "Infinity" : "-Infinity",
          "use null, a finite number or a string"];
      case "undefined":
        return ["undefined", "use null"];
    }
    if (ArrayIsArray(value)) {
      return ["an array with a custom prototype", "copy it with Array.from()"];
    }
    const kinds = [
      [DatePrototype, "a Date", "convert it with toISOString()"],
      [MapPrototype, "a Map", "convert it with Object.fromEntries(map)"],
      [SetPrototype, "a Set", "convert it with Array.from(set)"],
      [WeakMapPrototype, "a WeakMap", "it cannot be read; use a plain object"],
      [WeakSetPrototype, "a WeakSet", "it cannot be read; use an array"],
      [RegExpPrototype, "a RegExp", "convert it with String()"],
      [PromisePrototype, "a Promise", "await it first"],
      [ErrorPrototype, "an Error", "send its message (error.message) instead"],
      [TypedArrayPrototype, "a typed array", "convert it with Array.from()"],
      [ArrayBufferPrototype, "an ArrayBuffer", "convert it with Array.from(new Uint8Array(buffer))"],
    ];
    for (let i = 0; i < kinds.length; i++) {
      if (hasInChain(value, kinds[i][0])) return [kinds[i][1], kinds[i][2]];
    }
    let name;
    try {
      const ctor = ObjectGetPrototypeOf(value).constructor;
      const n = typeof ctor === "function" ? ctor.name : undefined;
      if (typeof n === "string" && n !== "") name = wellFormed(n);
    } catch (_) {
      // A hostile prototype: no name.
    }
    return [name === undefined ? "an object with a custom prototype" : "an instance of " + name,
      "copy its fields into a plain object ({ ...value })"];
  }

  function isIdentifier(key) {
    if (key.length === 0) return false;
    for (let i = 0; i < key.length; i++) {
      const c = ReflectApply(StringCharCodeAt, key, [i]);
      const letter = (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 36;
      if (!letter && !(i > 0 && c >= 48 && c <= 57)) return false;
    }
    return true;
  }

  // Returns JSON text, or undefined for a top-level undefined. Throws a record of
  // `notSerializableValue`, whose `path` says where (e.g. `.items[3]`), for a value that
  // cannot leave the sandbox, or for a getter or proxy trap that threw while reading it.
  function serialize(root) {
    if (root === undefined) return undefined;
    const ancestors = new SetCtor();
    function walk(value, depth) {
      switch (typeof value) {
        case "string":
          return JSONStringify(wellFormed(value));
        case "boolean":
          return value ? "true" : "false";
        case "number":
          if (!NumberIsFinite(value)) {
            const kind = unsupported(value);
            throw notSerializableValue(kind[0], kind[1]);
          }
          return JSONStringify(value);
        case "object":
          break;
        default: {
          // bigint, symbol, function, undefined in a position that cannot drop it
          const kind = unsupported(value);
          throw notSerializableValue(kind[0], kind[1]);
        }
      }
      if (value === null) return "null";
      if (depth >= MAX_DEPTH) {
        throw notSerializableValue("nested deeper than " + MAX_DEPTH + " levels", "flatten it");
      }
      if (ReflectApply(SetHas, ancestors, [value])) {
        throw notSerializableValue("a reference to one of its own parents (a cycle)",
          "copy the data without the back-reference");
      }
      ReflectApply(SetAdd, ancestors, [value]);
      let out;
      if (ArrayIsArray(value)) {
        if (ObjectGetPrototypeOf(value) !== ArrayPrototype) {
          const kind = unsupported(value);
          throw notSerializableValue(kind[0], kind[1]);
        }
        const length = value.length;
        out = "[";
        for (let i = 0; i < length; i++) {
          if (i > 0) out += ",";
          try {
            const item = value[i];
            out += item === undefined ? "null" : walk(item, depth + 1);
          } catch (error) {
            throw within(error, "[" + i + "]");
          }
        }
        out += "]";
      } else {
        const proto = ObjectGetPrototypeOf(value);
        if (proto !== ObjectPrototype && proto !== null) {
          const kind = unsupported(value);
          throw notSerializableValue(kind[0], kind[1]);
        }
        const keys = ObjectKeys(value);
        out = "{";
        let first = true;
        for (let i = 0; i < keys.length; i++) {
          const key = keys[i];
          try {
            const item = value[key];
            if (item === undefined) continue;
            if (!first) out += ",";
            first = false;
            out += JSONStringify(wellFormed(key)) + ":" + walk(item, depth + 1);
          } catch (error) {
            throw within(error, isIdentifier(key) ? "." + key : "[" + JSONStringify(wellFormed(key)) + "]");
          }
        }
        out += "}";
      }
      ReflectApply(SetDelete, ancestors, [value]);
      return out;
    }
    return walk(root, 0);
  }

  // The record to rethrow for `error`, raised while reading `segment` of a value: a record
  // gets the segment in front of its path; anything else was thrown by guest code (a getter,
  // a proxy trap) and becomes a record saying so.
  function within(error, segment) {
    if (isNotSerializable(error)) {
      error.path = segment + error.path;
      return error;
    }
    return {
      __proto__: null,
      mark: NOT_SERIALIZABLE,
      why: "could not be read: reading it threw: " + describe(error)[1],
      path: segment,
    };
  }

  // The message for a value that cannot leave the sandbox, e.g.
  // `Guest code returned a non-serializable value: result.d is a Date; convert it with ...`.
  function notSerializableMessage(summary, root, error) {
    if (isNotSerializable(error)) {
      let path = error.path;
      if (path.length > 160) {
        path = ReflectApply(StringSlice, path, [0, 80]) + "…" +
          ReflectApply(StringSlice, path, [-60]);
      }
      return summary + ": " + root + path + " " + error.why;
    }
    return summary + ": " + root + " could not be read: reading it threw: " + describe(error)[1];
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
      emitLog(wellFormed(line));
    };
  }

  const consoleObject = {
    log: makeLogger(),
    info: makeLogger(),
    warn: makeLogger(),
    error: makeLogger(),
  };
  ObjectDefineProperty(globalObject, "console", {
    __proto__: null,
    value: consoleObject,
    writable: true,
    enumerable: false,
    configurable: true,
  });

  // ---- tools ----

  // Calls in flight (sent, waiting for their tool_result), at most `maxPending`; the rest
  // wait in `queued` (sequence number -> record) and are sent in call order as results
  // arrive. Both live in the sandbox, so a guest that queues without bound meets its own
  // memory limit, not the runner's.
  let maxPending = 1;
  let inflight = 0;
  const queued = new MapCtor();
  let queueHead = 0;
  let queueTail = 0;

  function rejected(error) {
    return new PromiseCtor(function (_resolve, reject) {
      reject(error);
    });
  }

  // A tool call's promise used as if it were the result (`math.stats({}).mean`, a forgotten
  // `await`) is a TypeError naming the tool, not a silent `undefined`. Every tool-call promise
  // gets this prototype: a proxy whose target inherits from Promise.prototype, so `await`,
  // `then`, `instanceof Promise` and every other Promise behaviour are unchanged, and only a
  // string key that neither the Promise nor Object prototypes have (nor `toJSON`, which
  // JSON.stringify probes) throws. The tool's name lives in a WeakMap the guest cannot reach;
  // the handler has no prototype, so the guest cannot add traps to it.
  const toolPromises = new WeakMapCtor();
  const PROMISE_KEYS = { __proto__: null, then: 1, catch: 1, finally: 1, constructor: 1, toJSON: 1 };
  // The target cannot be changed through the proxy (its prototype, its properties), so one
  // guest statement cannot turn every later tool promise into something else.
  function refuse() {
    return false;
  }
  const toolPromisePrototype = new ProxyCtor({ __proto__: PromisePrototype }, {
    __proto__: null,
    get: function (target, key, receiver) {
      if (typeof key === "string" && PROMISE_KEYS[key] !== 1 && !ReflectHas(target, key)) {
        const tool = ReflectApply(WeakMapGet, toolPromises, [receiver]);
        if (tool !== undefined) throw new TypeErrorCtor(promiseReadMessage(key, tool));
      }
      return ReflectGet(target, key, receiver);
    },
    setPrototypeOf: refuse,
    defineProperty: refuse,
    deleteProperty: refuse,
    preventExtensions: refuse,
  });

  function promiseReadMessage(key, tool) {
    if (key.length > 60) key = ReflectApply(StringSlice, key, [0, 60]) + "…";
    const access = isIdentifier(key) ? "." + key : "[" + JSONStringify(wellFormed(key)) + "]";
    return access + " was read from the Promise that " + tool + "(...) returns, not from its " +
      "result: tool calls are asynchronous; write `const x = await " + tool +
      "(...)`, then use x" + access;
  }

  // `promise`, marked as the promise of a call of `tool` ("provider.tool").
  function toolPromise(promise, tool) {
    ObjectSetPrototypeOf(promise, toolPromisePrototype);
    ReflectApply(WeakMapSet, toolPromises, [promise, tool]);
    return promise;
  }

  // record: [providerName, safeName, json, resolve, reject]
  function dispatch(record) {
    const sent = sendToolCall(record[0], record[1], record[2]);
    if (typeof sent === "string") {
      inflight++;
      ReflectApply(MapSet, pending, [sent, [record[3], record[4]]]);
    } else if (ArrayIsArray(sent)) {
      // The runner refused to send it (e.g. over the message size limit).
      record[4](trustedError(sent[0], sent[1]));
    } else {
      // The execution is being torn down (cancelled or timed out): nothing is sent.
      record[4](trustedError("timeout", timeoutMessage));
    }
  }

  function pump() {
    while (inflight < maxPending && queueHead < queueTail) {
      const record = ReflectApply(MapGet, queued, [queueHead]);
      ReflectApply(MapDelete, queued, [queueHead]);
      queueHead++;
      dispatch(record);
    }
  }

  function makeTool(providerName, safeName) {
    const tool = providerName + "." + safeName;
    return function (input) {
      let json;
      try {
        json = serialize(input);
      } catch (error) {
        return toolPromise(rejected(trustedError("serialization_error", notSerializableMessage(
          INPUT_NOT_SERIALIZABLE + " to " + tool, "input", error))), tool);
      }
      let settleOk;
      let settleFailed;
      const promise = new PromiseCtor(function (resolve, reject) {
        settleOk = resolve;
        settleFailed = reject;
      });
      const record = [providerName, safeName, json, settleOk, settleFailed];
      if (inflight < maxPending && queueHead === queueTail) {
        dispatch(record);
      } else {
        ReflectApply(MapSet, queued, [queueTail, record]);
        queueTail++;
      }
      return toolPromise(promise, tool);
    };
  }

  // A tool of a provider the host declared unavailable: every call rejects with `tool_error`
  // saying why, and sends nothing.
  function makeUnavailableTool(providerName, key, why) {
    let name = key;
    if (name.length > 60) name = ReflectApply(StringSlice, name, [0, 60]) + "…";
    const tool = providerName + (isIdentifier(name) ? "." + name : "[" + JSONStringify(wellFormed(name)) + "]");
    return function () {
      return toolPromise(rejected(trustedError("tool_error",
        providerName + " is unavailable: " + why, "unavailable")), tool);
    };
  }

  // The namespace of an unavailable provider: any string key but `then` and `toJSON` (so
  // `await ns` and `JSON.stringify(ns)` stay ordinary) and those of Object.prototype reads as
  // a tool that rejects saying why; symbols read as on a plain object.
  function unavailableNamespace(name, tools, why) {
    const target = {};
    for (let t = 0; t < tools.length; t++) {
      define(target, tools[t][0], makeUnavailableTool(name, tools[t][0], why));
    }
    return new ProxyCtor(target, {
      __proto__: null,
      get: function (target, key, receiver) {
        if (typeof key === "string" && key !== "then" && key !== "toJSON" &&
          !ReflectHas(target, key)) {
          return makeUnavailableTool(name, key, why);
        }
        return ReflectGet(target, key, receiver);
      },
    });
  }

  // providers: [[name, [[safeName, alias | undefined], ...], unavailable | undefined], ...];
  // limit: calls in flight at once. An alias (the tool's original name, when it differs and
  // clashes with no safe name) is the same function, not enumerable: `Object.keys` of a
  // namespace stays its safe names.
  function install(providers, limit) {
    maxPending = limit > 0 ? limit : 1;
    for (let p = 0; p < providers.length; p++) {
      const name = providers[p][0];
      const tools = providers[p][1];
      const why = providers[p][2];
      let namespace;
      if (typeof why === "string") {
        namespace = unavailableNamespace(name, tools, why);
      } else {
        namespace = {};
        for (let t = 0; t < tools.length; t++) {
          define(namespace, tools[t][0], makeTool(name, tools[t][0]));
        }
        for (let t = 0; t < tools.length; t++) {
          const alias = tools[t][1];
          if (typeof alias !== "string") continue;
          ObjectDefineProperty(namespace, alias, {
            __proto__: null,
            value: namespace[tools[t][0]],
            writable: true,
            enumerable: false,
            configurable: true,
          });
        }
      }
      ObjectDefineProperty(globalObject, name, {
        __proto__: null,
        value: namespace,
        writable: true,
        enumerable: false,
        configurable: true,
      });
    }
  }

  // Settles a pending call: ok with a value, or failed with a trusted code and message (and
  // the refusal's reason, retry time and upstream status when the host gave them); then sends
  // what waits in the queue.
  function settle(callId, ok, value, code, message, reason, retryAfterMs, status) {
    const entry = ReflectApply(MapGet, pending, [callId]);
    if (entry === undefined) return false;
    ReflectApply(MapDelete, pending, [callId]);
    inflight--;
    if (ok) entry[0](value);
    else entry[1](trustedError(code, message, reason, retryAfterMs, status));
    pump();
    return true;
  }

  // An array the engine reads: without a prototype, so a slot it does not set reads as
  // undefined, never as what the guest put on Array.prototype (nor through a getter there).
  function own(items) {
    ObjectSetPrototypeOf(items, null);
    return items;
  }

  // The final value: ["ok", json | undefined] or ["error", code, message]. Whatever goes
  // wrong while reading it (a throwing getter or proxy trap included) is serialization_error.
  function finish(value) {
    try {
      return own(["ok", serialize(value)]);
    } catch (error) {
      return own(["error", "serialization_error",
        notSerializableMessage(RESULT_NOT_SERIALIZABLE, "result", error)]);
    }
  }

  // A rejection reason as [code, message, name, stack, reason, retryAfterMs, status]: trusted
  // codes survive with their reason, retry time and status, everything else is runtime_error
  // with the error's name and stack.
  function describe(reason) {
    const mark = typeof reason === "object" && reason !== null
      ? ReflectApply(WeakMapGet, trusted, [reason])
      : undefined;
    if (mark !== undefined) {
      return own([mark[0], mark[1], undefined, undefined, mark[2], mark[3], mark[4]]);
    }
    let message;
    try {
      const candidate = reason !== null && reason !== undefined ? reason.message : undefined;
      message = typeof candidate === "string" ? candidate : safeString(reason);
    } catch (_) {
      message = safeString(reason);
    }
    // For the location of an uncaught error: its name and the stack it was thrown with.
    let name;
    let stack;
    if (typeof reason === "object" && reason !== null) {
      try {
        const n = reason.name;
        if (typeof n === "string") name = wellFormed(n);
        const s = reason.stack;
        if (typeof s === "string") stack = wellFormed(s);
      } catch (_) {
        // A throwing getter: no name, no location.
      }
    }
    return own(["runtime_error", wellFormed(message), name, stack, undefined, undefined,
      undefined]);
  }

  // ---- replay (installed only for an execute that carries `replay`) ----

  const DateCtor = Date;
  const DateToString = DatePrototype.toString;
  const ReflectConstruct = Reflect.construct;
  const MathObject = Math;

  function dataProperty(target, key, value) {
    ObjectDefineProperty(target, key, {
      __proto__: null,
      value: value,
      writable: true,
      enumerable: false,
      configurable: true,
    });
  }

  // Makes `now` (native: the replayed, then real, clock, recording every reading) the one
  // source of the guest's current time, and `random` (native, seeded) its Math.random. The
  // guest's `Date` becomes a Proxy of the original whose only traps read `now` where the
  // original reads the clock (`new Date()`, `Date()`); everything else reaches the original
  // unchanged (statics in their order, `prototype`, `length`, `name`, subclassing,
  // `instanceof`), with `Date.now` replaced by `now` in place. The handler has no prototype
  // and cannot be reached from a Proxy; neither native function holds anything the guest
  // could use besides a reading, and the replayed list never enters the sandbox.
  function replay(now, random) {
    const ReplayDate = new ProxyCtor(DateCtor, {
      __proto__: null,
      apply: function () {
        return ReflectApply(DateToString, ReflectConstruct(DateCtor, [now()]), []);
      },
      construct: function (target, args, newTarget) {
        return ReflectConstruct(DateCtor, args.length === 0 ? [now()] : args, newTarget);
      },
    });
    dataProperty(DateCtor, "now", now);
    dataProperty(DatePrototype, "constructor", ReplayDate);
    dataProperty(globalObject, "Date", ReplayDate);
    dataProperty(MathObject, "random", random);
  }

  // ---- the guest's own promise ----

  // undefined while the guest runs; then ["ok", json | undefined] or ["error", code, message].
  let outcome;

  function fail(reason) {
    const described = describe(reason);
    return own(["error", described[0], described[1], described[2], described[3], described[4],
      described[5], described[6]]);
  }

  // When even describing the failure fails (a guest getter that throws, say), the program
  // still ends, as a plain runtime_error.
  const UNREADABLE = "the program failed with an error that could not be read";
  function failSafely(reason) {
    try {
      return fail(reason);
    } catch (_) {
      return own(["error", "runtime_error", UNREADABLE]);
    }
  }

  function start(program) {
    outcome = undefined;
    let value;
    try {
      value = typeof program === "function" ? program() : program;
    } catch (error) {
      outcome = failSafely(error);
      return;
    }
    const promise = ReflectApply(PromiseResolve, PromiseCtor, [value]);
    ReflectApply(PromiseThen, promise, [
      function (result) {
        try {
          outcome = finish(result);
        } catch (error) {
          outcome = failSafely(error);
        }
      },
      function (reason) {
        outcome = failSafely(reason);
      },
    ]);
  }

  function poll() {
    return outcome;
  }

  return {
    install: install,
    settle: settle,
    describe: describe,
    start: start,
    poll: poll,
    replay: replay,
  };
})
