//! The only module that touches rquickjs: sandboxes, the guest surface, and the drive loop.
//!
//! Everything the guest can see is registered in [`Sandbox::new`] (intrinsics, `console`)
//! and [`Engine::run`] (provider namespaces), both through `bootstrap.js`. No engine handle
//! leaves this module: the rest of the runner sees [`Finished`], plain Rust data.
//!
//! A [`Sandbox`] is one QuickJS runtime plus one context, used for exactly one execution and
//! then dropped. The [`Engine`] keeps one spare sandbox ready, built while the session is
//! idle, so an `execute` does not pay for creating one.

mod alloc;
mod precompiled;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use execbox_protocol::{
    replace_lone_surrogates, ErrorBody, ErrorCode, Execute, LogsTruncated, Message, RawValue,
    ToolCall, ToolResult,
};
use rquickjs::context::EvalOptions;
use rquickjs::function::Args;
use rquickjs::{Array, Context, Ctx, Function, JsLifetime, Object, Runtime, Value};

use crate::hints;
use crate::location::{Locator, GUEST_FILENAME};
use crate::logs::LogBuffer;
use crate::normalize::{fenced_program, normalize, Compiled};
use crate::replay::{Random, Replaying};
use crate::timeout::{timed_out, Busy, InFlight};
use crate::transport::{oversized, Outbound};
use crate::typescript::{self, StripError};
use alloc::{Budget, BudgetAllocator};

/// What the engine waits for while the guest is suspended on tool calls.
#[derive(Debug)]
pub(crate) enum Event {
    /// A `tool_result` arrived (for any callId; the engine checks it).
    ToolResult(ToolResult),
    /// The host cancelled this execution.
    Cancel,
    /// The transport closed or failed.
    Closed,
    /// The deadline passed with nothing else happening.
    Deadline,
}

/// The end of an execution, as plain data.
#[derive(Debug)]
pub(crate) struct Finished {
    /// Console lines after truncation.
    pub(crate) logs: Vec<String>,
    /// What truncation took from the logs, when it took anything.
    pub(crate) logs_truncated: Option<LogsTruncated>,
    /// The result JSON (`None` for undefined) or the error.
    pub(crate) outcome: Result<Option<Box<RawValue>>, ErrorBody>,
    /// True when the transport closed: there is nobody to send `done` to.
    pub(crate) aborted: bool,
}

/// Stack QuickJS may use for guest code; deeper recursion is a RangeError (runtime_error).
/// The thread running the engine must have a comfortably larger stack (see `ENGINE_STACK_BYTES`).
const MAX_GUEST_STACK_BYTES: usize = 4 * 1024 * 1024;
/// Stack size for threads that run an [`Engine`].
pub(crate) const ENGINE_STACK_BYTES: usize = 64 * 1024 * 1024;

/// The number of the next `tool_call`, shared by every engine of the process: a callId is
/// never reused, so a late `tool_result` of one execution can never match a call of another.
static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// Limits of one execution that come from the runner's configuration, not from the request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunLimits {
    /// The largest message the runner may send; a `tool_call` over it is refused in the
    /// sandbox with `serialization_error`.
    pub(crate) max_message_bytes: usize,
    /// Tool calls sent and not yet answered, at most; further calls wait in the sandbox.
    pub(crate) max_pending_tool_calls: usize,
}

/// Offers the core to another thread that is ready to run on it, if any (a system call of a
/// microsecond or so when there is none).
fn between_steps() {
    std::thread::yield_now();
}

/// Runs executions, one at a time, each in a fresh sandbox.
pub(crate) struct Engine {
    spare: Option<Sandbox>,
    retired: Option<Sandbox>,
    interrupt: Arc<AtomicBool>,
    /// Raised when an execution's allocation is refused, for whoever must answer for an
    /// engine that cannot (the watchdog: `memory_limit`, not `timeout`).
    memory: Arc<AtomicBool>,
}

impl Engine {
    /// An engine with no sandbox built yet. `interrupt` is the flag a transport sets to stop
    /// the running guest at once (cancel, close); the interrupt handler reads it, so this
    /// works even in a tight CPU loop. An engine is bound to the thread that creates it.
    pub(crate) fn new(interrupt: Arc<AtomicBool>) -> Self {
        Engine {
            spare: None,
            retired: None,
            interrupt,
            memory: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Raises `flag` whenever an execution exceeds its memory limit (it is lowered when the
    /// next execution starts). Call it before the first execution.
    pub(crate) fn report_memory_to(&mut self, flag: Arc<AtomicBool>) {
        self.memory = flag;
        self.spare = None;
    }

    /// Idle-time work: frees the last execution's sandbox and builds the next one.
    ///
    /// It runs while the next execution does, and often on the same core as the host's thread
    /// waiting for that execution's answer (the scheduler keeps a woken thread on the core it
    /// last ran on, busy or not): the work offers its core ([`between_steps`]) before and
    /// after each of its steps (freeing, the context, the bootstrap's bytecode, running it),
    /// a few tens of microseconds apart, instead of holding it for a few hundred.
    pub(crate) fn prepare(&mut self) {
        between_steps();
        self.retired = None;
        between_steps();
        if self.spare.is_none() {
            match Sandbox::new(self.interrupt.clone(), self.memory.clone(), between_steps) {
                Ok(sandbox) => self.spare = Some(sandbox),
                Err(e) => tracing::error!("cannot prepare a sandbox: {e}"),
            }
        }
    }

    /// Runs one execution to its end. `started` is when `started` was sent (the clock of
    /// `timeoutMs`); `replaying`, for an `execute` with `replay`, takes over the guest's clock
    /// and `Math.random()`; `wait` blocks until the next relevant event or the given deadline.
    pub(crate) fn run(
        &mut self,
        exec: &Execute,
        started: Instant,
        limits: RunLimits,
        out: Arc<dyn Outbound>,
        replaying: Option<&Replaying>,
        wait: &mut dyn FnMut(Instant) -> Event,
    ) -> Finished {
        self.retired = None;
        let sandbox = match self.spare.take() {
            Some(s) => s,
            // Built now, on the critical path: nothing else comes first.
            None => match Sandbox::new(self.interrupt.clone(), self.memory.clone(), || {}) {
                Ok(s) => s,
                Err(e) => {
                    return Finished {
                        logs: Vec::new(),
                        logs_truncated: None,
                        outcome: Err(ErrorBody::new(
                            ErrorCode::InternalError,
                            format!("cannot create a sandbox: {e}"),
                        )),
                        aborted: false,
                    }
                }
            },
        };
        let deadline = started + std::time::Duration::from_millis(exec.options.timeout_ms);
        let finished = sandbox.execute(exec, deadline, limits, out, replaying, wait);
        self.retired = Some(sandbox);
        finished
    }
}

/// Per-execution state the native functions share with the engine.
struct ExecState {
    logs: LogBuffer,
    /// Whether the running program is the normaliser's fallback, and its code when it is
    /// not the request's (TypeScript, erased); `None` before it runs.
    compiled: Option<(bool, Option<String>)>,
    /// The tool calls in flight, by callId.
    pending: HashMap<String, InFlight>,
    /// The stack of the last exception the engine caught from the guest's start or a job: where
    /// the guest was when an interrupt stopped it.
    thrown_stack: Option<String>,
    out: Option<Arc<dyn Outbound>>,
    max_message_bytes: usize,
}

/// The private functions `bootstrap.js` returns, kept in the runtime's userdata.
struct Hooks<'js> {
    install: Function<'js>,
    settle: Function<'js>,
    describe: Function<'js>,
    start: Function<'js>,
    poll: Function<'js>,
    replay: Function<'js>,
}

// SAFETY: `Hooks` holds only `'js`-bound handles; changing the lifetime changes nothing else.
#[allow(unsafe_code)]
unsafe impl<'js> JsLifetime<'js> for Hooks<'js> {
    type Changed<'to> = Hooks<'to>;
}

/// One runtime and context, with the trusted surface installed. Fields drop in order:
/// the context before the runtime.
struct Sandbox {
    context: Context,
    runtime: Runtime,
    budget: Rc<Budget>,
    deadline: Rc<Cell<Option<Instant>>>,
    interrupt: Arc<AtomicBool>,
    state: Rc<RefCell<ExecState>>,
}

/// Why the guest was stopped from outside.
enum Stop {
    Cancelled,
    Closed,
    Memory,
    Deadline(Busy),
}

impl Sandbox {
    /// A fresh sandbox; `between_steps` runs between the steps of building it.
    fn new(
        interrupt: Arc<AtomicBool>,
        memory: Arc<AtomicBool>,
        between_steps: fn(),
    ) -> rquickjs::Result<Sandbox> {
        let budget = Budget::new(memory);
        let runtime = Runtime::new_with_alloc(BudgetAllocator {
            budget: budget.clone(),
        })?;
        runtime.set_max_stack_size(MAX_GUEST_STACK_BYTES);
        let deadline: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(None));
        {
            let interrupt = interrupt.clone();
            let budget = budget.clone();
            let deadline = deadline.clone();
            runtime.set_interrupt_handler(Some(Box::new(move || {
                let stop = must_stop(&interrupt, &budget, &deadline);
                if stop {
                    // QuickJS now builds the uncatchable "interrupted" error; a budget that
                    // refuses everything would leave it a catchable out-of-memory instead.
                    budget.allow_unwinding();
                }
                stop
            })));
        }
        let stopped: Rc<dyn Fn() -> bool> = {
            let (interrupt, budget, deadline) =
                (interrupt.clone(), budget.clone(), deadline.clone());
            Rc::new(move || must_stop(&interrupt, &budget, &deadline))
        };
        let context = Context::full(&runtime)?;
        between_steps();
        let state = Rc::new(RefCell::new(ExecState {
            logs: LogBuffer::default(),
            compiled: None,
            pending: HashMap::new(),
            thrown_stack: None,
            out: None,
            max_message_bytes: usize::MAX,
        }));
        context.with(|ctx| {
            register_guest_surface(&ctx, &state, stopped, between_steps).map_err(|e| {
                if matches!(e, rquickjs::Error::Exception) {
                    let thrown = ctx.catch();
                    let text = thrown
                        .as_object()
                        .and_then(|o| o.get::<_, String>("message").ok())
                        .unwrap_or_else(|| format!("{thrown:?}"));
                    tracing::error!("bootstrap failed: {text}");
                }
                e
            })
        })?;
        Ok(Sandbox {
            context,
            runtime,
            budget,
            deadline,
            interrupt,
            state,
        })
    }

    fn stop_reason(&self) -> Option<Stop> {
        if self.interrupt.load(Ordering::SeqCst) {
            // Set by a cancel or a close; the session tells a close apart (and sends no
            // `done` for it), so here both stop the guest the same way.
            return Some(Stop::Cancelled);
        }
        if self.budget.exceeded() {
            return Some(Stop::Memory);
        }
        if self.deadline.get().is_some_and(|d| Instant::now() >= d) {
            return Some(Stop::Deadline(Busy::Running));
        }
        None
    }

    fn execute(
        &self,
        exec: &Execute,
        deadline: Instant,
        limits: RunLimits,
        out: Arc<dyn Outbound>,
        replaying: Option<&Replaying>,
        wait: &mut dyn FnMut(Instant) -> Event,
    ) -> Finished {
        {
            let mut state = self.state.borrow_mut();
            state.logs = LogBuffer::new(&exec.options);
            state.compiled = None;
            state.pending.clear();
            state.thrown_stack = None;
            state.out = Some(out);
            state.max_message_bytes = limits.max_message_bytes;
        }
        let limit = usize::try_from(exec.options.memory_limit_bytes).unwrap_or(usize::MAX);
        self.budget.arm(limit);
        self.deadline.set(Some(deadline));

        let outcome = self.drive(exec, limits, replaying, wait);

        self.budget.lift();
        self.deadline.set(None);
        let mut state = self.state.borrow_mut();
        state.out = None;
        let pending: Vec<InFlight> = std::mem::take(&mut state.pending).into_values().collect();
        let thrown_stack = state.thrown_stack.take();
        let compiled = state.compiled.clone();
        let (logs, logs_truncated) = std::mem::take(&mut state.logs).into_parts();
        drop(state);
        let (outcome, aborted) = match outcome {
            Ok(outcome) => (outcome, false),
            Err(Stop::Closed) => (Err(ErrorBody::timeout()), true),
            Err(Stop::Memory) => (Err(ErrorBody::memory_limit()), false),
            Err(Stop::Cancelled) => (Err(ErrorBody::timeout()), false),
            Err(Stop::Deadline(busy)) => {
                // Where the guest was, when an interrupt stopped it in its own code.
                let location = match (busy, compiled, thrown_stack) {
                    (Busy::Running, Some((fallback, stripped)), Some(stack)) => LazyLocator {
                        exec,
                        stripped: stripped.as_deref(),
                        fallback,
                    }
                    .get()
                    .running_at(&stack),
                    _ => None,
                };
                let error = timed_out(exec.options.timeout_ms, busy, location, &pending);
                (Err(error), false)
            }
        };
        Finished {
            logs,
            logs_truncated,
            outcome,
            aborted,
        }
    }

    /// Starts the guest and pumps jobs and host events until it settles or is stopped.
    fn drive(
        &self,
        exec: &Execute,
        limits: RunLimits,
        replaying: Option<&Replaying>,
        wait: &mut dyn FnMut(Instant) -> Event,
    ) -> Result<Result<Option<Box<RawValue>>, ErrorBody>, Stop> {
        let started = self.context.with(|ctx| {
            start_guest(&ctx, exec, limits, replaying, &self.state)
                .map_err(|e| no_module_statements(exec, e))
        });
        if let Some(stop) = self.stop_reason() {
            return Err(stop);
        }
        if let Err(failure) = started {
            return Ok(Err(failure));
        }
        loop {
            loop {
                match self.runtime.execute_pending_job() {
                    // A job that caught its own interrupt (QuickJS turns one raised inside a
                    // promise executor or a thenable's `then` getter into a rejection) must not
                    // let the next job run.
                    Ok(true) => {
                        if let Some(stop) = self.stop_reason() {
                            return Err(stop);
                        }
                    }
                    Ok(false) => break,
                    Err(_) => {
                        if let Some(stop) = self.stop_reason() {
                            // The uncatchable interrupt is still pending: its stack says where
                            // the guest was.
                            let stack = self.context.with(|ctx| stack_of(&ctx.catch()));
                            self.state.borrow_mut().thrown_stack = stack;
                            return Err(stop);
                        }
                    }
                }
            }
            if let Some(stop) = self.stop_reason() {
                return Err(stop);
            }
            let compiled = self.state.borrow().compiled.clone();
            let locator = compiled.as_ref().map(|(fallback, stripped)| LazyLocator {
                exec,
                stripped: stripped.as_deref(),
                fallback: *fallback,
            });
            if let Some(outcome) = self
                .context
                .with(|ctx| poll_outcome(&ctx, locator.as_ref()))
            {
                // Serialising the result may itself have run out of memory.
                return match self.stop_reason() {
                    Some(stop) => Err(stop),
                    None => Ok(outcome),
                };
            }
            let deadline = self.deadline.get().expect("armed while driving");
            match wait(deadline) {
                Event::ToolResult(result) => self.settle(result),
                Event::Cancel => return Err(Stop::Cancelled),
                Event::Closed => return Err(Stop::Closed),
                Event::Deadline => return Err(Stop::Deadline(Busy::Waiting)),
            }
        }
    }

    fn settle(&self, result: ToolResult) {
        if self
            .state
            .borrow_mut()
            .pending
            .remove(&result.call_id)
            .is_none()
        {
            // Late (its execution ended), answered twice, or never sent: callIds are unique
            // per process, so it cannot belong to this execution.
            tracing::warn!(call_id = %result.call_id, "ignoring tool_result: no pending call of the active execution has that callId");
            return;
        }
        self.context.with(|ctx| {
            let Some(hooks) = ctx.userdata::<Hooks>() else {
                return;
            };
            let call_id = result.call_id.as_str();
            let undefined = Value::new_undefined(ctx.clone());
            let settled = match &result.outcome {
                Ok(None) => hooks.settle.call::<_, Value>((call_id, true, undefined)),
                Ok(Some(raw)) => match ctx.json_parse(
                    // Escaped lone surrogates become U+FFFD, as on the way out.
                    replace_lone_surrogates(raw.get()).unwrap_or_else(|| raw.get().to_owned()),
                ) {
                    Ok(value) => hooks.settle.call::<_, Value>((call_id, true, value)),
                    Err(_) => {
                        let _ = ctx.catch();
                        hooks.settle.call::<_, Value>((
                            call_id,
                            false,
                            undefined,
                            ErrorCode::SerializationError.as_str(),
                            "Tool result could not be rebuilt in the sandbox",
                        ))
                    }
                },
                Err(body) => {
                    // More arguments than a tuple carries: pushed one by one.
                    let mut args = Args::new(ctx.clone(), 8);
                    let pushed = args
                        .push_arg(call_id)
                        .and_then(|()| args.push_arg(false))
                        .and_then(|()| args.push_arg(undefined))
                        .and_then(|()| args.push_arg(body.code.as_str()))
                        .and_then(|()| args.push_arg(body.message.as_str()))
                        .and_then(|()| args.push_arg(body.reason.as_deref()))
                        // A number the guest reads exactly (below 2^53).
                        .and_then(|()| {
                            args.push_arg(body.retry_after_ms.map(|ms| ms.min(1 << 53) as f64))
                        })
                        .and_then(|()| args.push_arg(body.status.map(f64::from)));
                    pushed.and_then(|()| hooks.settle.call_arg::<Value>(args))
                }
            };
            if settled.is_err() {
                let _ = ctx.catch();
            }
        });
    }
}

/// Whether an armed sandbox must stop: cancelled or closed, out of memory, or past its
/// deadline. An unarmed sandbox (being prepared) never stops.
fn must_stop(interrupt: &AtomicBool, budget: &Budget, deadline: &Cell<Option<Instant>>) -> bool {
    deadline.get().is_some_and(|d| {
        interrupt.load(Ordering::Relaxed) || budget.exceeded() || Instant::now() >= d
    })
}

/// Registers everything the guest can see besides the ECMAScript intrinsics: `console`, via
/// `bootstrap.js`. Provider namespaces are added per execution by the `install` hook.
fn register_guest_surface<'js>(
    ctx: &Ctx<'js>,
    state: &Rc<RefCell<ExecState>>,
    stopped: Rc<dyn Fn() -> bool>,
    between_steps: fn(),
) -> rquickjs::Result<()> {
    let log_state = state.clone();
    let emit_log = Function::new(ctx.clone(), move |line: String| {
        log_state.borrow_mut().logs.push(&line);
    })?;
    let call_state = state.clone();
    let send_tool_call = Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>,
              provider: String,
              tool: String,
              input: Option<String>|
              -> rquickjs::Result<Value<'js>> {
            // A cancelled, timed-out or out-of-memory execution sends nothing more; the proxy
            // rejects the call with a trusted timeout instead (undefined).
            if stopped() {
                return Ok(Value::new_undefined(ctx));
            }
            let mut state = call_state.borrow_mut();
            // No sink: the execution is being torn down, and nothing may be sent any more.
            let Some(out) = state.out.clone() else {
                return Ok(Value::new_undefined(ctx));
            };
            let refuse = |code: ErrorCode, message: String| -> rquickjs::Result<Value<'js>> {
                let pair = Array::new(ctx.clone())?;
                pair.set(0, code.as_str())?;
                pair.set(1, message)?;
                Ok(pair.into_value())
            };
            let input = match input.map(RawValue::from_string).transpose() {
                Ok(input) => input,
                Err(e) => {
                    return refuse(
                        ErrorCode::SerializationError,
                        format!("Guest code passed a tool input that is not valid JSON ({e})"),
                    )
                }
            };
            let call_id = format!("call-{}", NEXT_CALL.fetch_add(1, Ordering::Relaxed));
            let in_flight = InFlight::new(format!("{provider}.{tool}"));
            let message = Message::ToolCall(ToolCall {
                call_id: call_id.clone(),
                provider_name: provider,
                safe_tool_name: tool,
                input,
            });
            let limit = state.max_message_bytes;
            if let Some(size) = oversized(&message, limit) {
                return refuse(
                    ErrorCode::SerializationError,
                    format!(
                        "Tool input too large: the tool_call message would be {size} bytes, over \
                         the runner's message limit of {limit} bytes; pass less data per call"
                    ),
                );
            }
            state.pending.insert(call_id.clone(), in_flight);
            drop(state);
            out.send(&message);
            rquickjs::String::from_str(ctx, &call_id).map(|s| s.into_value())
        },
    )?;
    let factory: Function = precompiled::load(ctx)?.get()?;
    between_steps();
    let hooks: Object = factory.call((
        emit_log,
        send_tool_call,
        ctx.globals(),
        execbox_protocol::TIMEOUT_MESSAGE,
    ))?;
    let hooks = Hooks {
        install: hooks.get("install")?,
        settle: hooks.get("settle")?,
        describe: hooks.get("describe")?,
        start: hooks.get("start")?,
        poll: hooks.get("poll")?,
        replay: hooks.get("replay")?,
    };
    ctx.store_userdata(hooks)
        .map_err(|_| rquickjs::Error::Unknown)?;
    Ok(())
}

/// Hands the guest's clock and `Math.random()` to `replaying` (the `replay` hook of
/// `bootstrap.js` puts these two native functions in place); nothing else can reach its state.
fn install_replay<'js>(
    ctx: &Ctx<'js>,
    hooks: &Hooks<'js>,
    replaying: &Replaying,
) -> rquickjs::Result<()> {
    let clock = replaying.clock.clone();
    let now = Function::new(ctx.clone(), move || -> f64 {
        clock.lock().unwrap_or_else(|e| e.into_inner()).read()
    })?
    .with_name("now")?;
    let random = RefCell::new(Random::new(replaying.random_seed));
    let random = Function::new(ctx.clone(), move || -> f64 {
        random.borrow_mut().next_f64()
    })?
    .with_name("random")?;
    hooks.replay.call::<_, ()>((now, random))
}

/// Installs the providers (and the replay hooks, for a re-run), compiles the normalised
/// program and calls it. An `Err` is a failure before the guest's promise exists (e.g. a
/// syntax error).
fn start_guest(
    ctx: &Ctx<'_>,
    exec: &Execute,
    limits: RunLimits,
    replaying: Option<&Replaying>,
    state: &RefCell<ExecState>,
) -> Result<(), ErrorBody> {
    let hooks = ctx
        .userdata::<Hooks>()
        .ok_or_else(|| ErrorBody::new(ErrorCode::InternalError, "sandbox hooks are missing"))?;
    let install = || -> rquickjs::Result<()> {
        let providers = Array::new(ctx.clone())?;
        for (i, provider) in exec.providers.iter().enumerate() {
            let tools = Array::new(ctx.clone())?;
            let aliases = hints::aliases(provider);
            for (j, (tool, alias)) in provider.tools.iter().zip(aliases).enumerate() {
                let pair = Array::new(ctx.clone())?;
                pair.set(0, tool.safe_name.as_str())?;
                pair.set(1, alias)?;
                tools.set(j, pair)?;
            }
            let entry = Array::new(ctx.clone())?;
            entry.set(0, provider.name.as_str())?;
            entry.set(1, tools)?;
            entry.set(2, provider.unavailable.as_deref())?;
            providers.set(i, entry)?;
        }
        let max_pending = u32::try_from(limits.max_pending_tool_calls).unwrap_or(u32::MAX);
        hooks.install.call::<_, ()>((providers, max_pending))
    };
    install().map_err(|e| engine_failure(ctx, e, "installing the providers"))?;
    if let Some(replaying) = replaying {
        install_replay(ctx, &hooks, replaying)
            .map_err(|e| engine_failure(ctx, e, "installing the replayed clock and random"))?;
    }

    if exec.code.contains('\0') {
        // Counted in the program as written: inside its fence when it has one.
        let body = fenced_program(&exec.code);
        let text = if body.contains('\0') {
            body
        } else {
            &exec.code
        };
        let at = text.find('\0').unwrap_or_default();
        let line = text[..at].matches('\n').count() + 1;
        let column = text[..at]
            .rsplit('\n')
            .next()
            .map_or(0, |l| l.chars().count())
            + 1;
        let (line, column) = (
            u32::try_from(line).unwrap_or(u32::MAX),
            u32::try_from(column).unwrap_or(u32::MAX),
        );
        let message = "the code contains a NUL character (U+0000); write it as \\0 or \\u0000 \
                       inside a string literal";
        return Err(syntax_error_at(exec, message.into(), line, column));
    }
    // TypeScript is erased first when the fence says so, and otherwise only when the code
    // does not compile as JavaScript: plain JavaScript pays nothing for it.
    let mut stripped: Option<String> = None;
    // Declared TypeScript that its parser refuses: shown if JavaScript's parser refuses it too.
    let mut refused_as_typescript: Option<StripError> = None;
    if typescript::is_typescript_fence(&exec.code) {
        match typescript::strip(fenced_program(&exec.code)) {
            Ok(js) => stripped = Some(js),
            Err(failure @ StripError::Unsupported { .. }) => {
                return Err(not_erasable(exec, &failure));
            }
            Err(syntax @ StripError::Syntax { .. }) => refused_as_typescript = Some(syntax),
            Err(StripError::Invalid) => {}
        }
    }
    let (function, fallback) = match compile_program(ctx, stripped.as_deref().unwrap_or(&exec.code))
    {
        Ok(compiled) => compiled,
        Err((failure, fallback)) if stripped.is_some() => {
            return Err(located(exec, stripped.as_deref(), fallback, &failure))
        }
        Err((failure, fallback)) if refused_as_typescript.is_some() => {
            let javascript = located(exec, None, fallback, &failure);
            let typescript = refused_as_typescript.unwrap_or(StripError::Invalid);
            return Err(later_error(exec, javascript, &typescript));
        }
        // Too large to be erased: the JavaScript error is the one to show.
        Err((failure, fallback))
            if fenced_program(&exec.code).len() > typescript::MAX_TYPESCRIPT_BYTES =>
        {
            return Err(located(exec, None, fallback, &failure))
        }
        Err((failure, fallback)) => match typescript::strip(fenced_program(&exec.code)) {
            Ok(js) if js != fenced_program(&exec.code) => match compile_program(ctx, &js) {
                Ok(compiled) => {
                    stripped = Some(js);
                    compiled
                }
                Err((failure, fallback)) => {
                    return Err(located(exec, Some(&js), fallback, &failure))
                }
            },
            Err(unsupported @ StripError::Unsupported { .. }) => {
                return Err(not_erasable(exec, &unsupported))
            }
            Err(syntax @ StripError::Syntax { .. }) => {
                let javascript = located(exec, None, fallback, &failure);
                return Err(later_error(exec, javascript, &syntax));
            }
            _ => return Err(located(exec, None, fallback, &failure)),
        },
    };
    let code = stripped.clone();
    state.borrow_mut().compiled = Some((fallback, stripped));
    hooks.start.call::<_, ()>((function,)).map_err(|e| match e {
        rquickjs::Error::Exception => {
            let thrown = ctx.catch();
            // Kept for a timeout: an interrupt is the one exception the guest cannot catch.
            state.borrow_mut().thrown_stack = stack_of(&thrown);
            let locator = LazyLocator {
                exec,
                stripped: code.as_deref(),
                fallback,
            };
            describe(ctx, thrown, Some(&locator))
        }
        other => engine_failure(ctx, other, "starting the guest"),
    })
}

/// A syntax error at a program's `import` or `export` statement: that statement, with a
/// message saying there are no modules and the tools are globals. Any other error is kept.
fn no_module_statements(exec: &Execute, error: ErrorBody) -> ErrorBody {
    if error.name.as_deref() != Some("SyntaxError") {
        return error;
    }
    let Some((line, column, keyword)) = hints::module_statement(fenced_program(&exec.code)) else {
        return error;
    };
    // Only where the parser stopped at that statement: a real error elsewhere (an `import` line
    // inside a template string, a guest's own SyntaxError) is the one to show.
    if error.location.as_ref().map(|l| l.line) != Some(line) {
        return error;
    }
    let locator = LazyLocator {
        exec,
        stripped: None,
        fallback: true,
    }
    .get();
    let message = hints::module_statement_message(keyword, locator.namespaces());
    ErrorBody::new(ErrorCode::RuntimeError, message)
        .with_name("SyntaxError")
        .with_location(locator.at(line, column))
}

/// Normalises and compiles `code`: the primary form, then the fallback. On failure, the error
/// to show (the fallback's, which is the user's code wrapped as it is) and which form it was.
fn compile_program<'js>(
    ctx: &Ctx<'js>,
    code: &str,
) -> Result<(Value<'js>, bool), (CompileFailure, bool)> {
    let program = normalize(code);
    match compile(ctx, &program.compiled(false)) {
        Ok(f) => Ok((f, false)),
        Err(first) => match program.fallback {
            Some(_) => compile(ctx, &program.compiled(true))
                .map(|f| (f, true))
                .map_err(|second| (second, true)),
            None => Err((first, false)),
        },
    }
}

/// TypeScript that cannot be erased, as a wire error naming the construct and its line.
fn not_erasable(exec: &Execute, failure: &StripError) -> ErrorBody {
    let StripError::Unsupported { what, line, column } = failure else {
        return ErrorBody::new(ErrorCode::RuntimeError, "TypeScript could not be erased");
    };
    let text = if what.starts_with("a TypeScript program over") {
        format!("{what}; send it as JavaScript")
    } else {
        format!(
            "{what}: only type annotations that can be erased are run (no enum, namespace or \
             parameter property); write plain JavaScript for it"
        )
    };
    syntax_error_at(exec, text, *line, *column)
}

/// A `SyntaxError` at a position of the program as written (the fenced body).
fn syntax_error_at(exec: &Execute, message: String, line: u32, column: u32) -> ErrorBody {
    let locator = LazyLocator {
        exec,
        stripped: None,
        fallback: true,
    };
    ErrorBody::new(ErrorCode::RuntimeError, message)
        .with_name("SyntaxError")
        .with_location(locator.get().at(line, column))
}

/// The error to show for a program that compiles neither as JavaScript (`javascript`) nor as
/// TypeScript (`typescript`, the parser's complaint): the one that got further into the
/// program. A JavaScript parser stopped by a type annotation before a later syntax error
/// would point at the wrong line; plain JavaScript keeps its own parser's words.
fn later_error(exec: &Execute, javascript: ErrorBody, typescript: &StripError) -> ErrorBody {
    let StripError::Syntax {
        message,
        line,
        column,
    } = typescript
    else {
        return javascript;
    };
    let js_at = javascript.location.as_ref().map(|l| (l.line, l.column));
    if js_at.is_some_and(|at| at >= (*line, *column)) {
        return javascript;
    }
    syntax_error_at(exec, message.clone(), *line, *column)
}

/// What it takes to locate an error of the running program; the [`Locator`] is built only
/// when an error needs one (normalising again is cheaper than keeping a copy per execution).
pub(crate) struct LazyLocator<'a> {
    exec: &'a Execute,
    /// The code that runs when it is not `exec.code`: TypeScript with its types erased.
    stripped: Option<&'a str>,
    /// Whether the normaliser's fallback is what runs.
    fallback: bool,
}

impl LazyLocator<'_> {
    fn get(&self) -> Locator {
        let namespaces = self
            .exec
            .providers
            .iter()
            .map(|p| {
                let tools = p.tools.iter().map(|t| t.safe_name.clone()).collect();
                (p.name.clone(), tools)
            })
            .collect();
        let code = self.stripped.unwrap_or(&self.exec.code);
        let compiled = normalize(code).compiled(self.fallback);
        Locator::new(&self.exec.code, compiled).with_providers(namespaces)
    }
}

/// A compile failure as a wire error: the syntax error's name and message, located.
fn located(
    exec: &Execute,
    stripped: Option<&str>,
    fallback: bool,
    failure: &CompileFailure,
) -> ErrorBody {
    match failure {
        CompileFailure::Syntax {
            name,
            message,
            stack,
        } => {
            let locator = LazyLocator {
                exec,
                stripped,
                fallback,
            };
            let mut error = ErrorBody::new(ErrorCode::RuntimeError, message.clone());
            if !name.is_empty() {
                error = error.with_name(name.clone());
            }
            locator.get().locate(error, stack)
        }
        CompileFailure::Other(body) => body.clone(),
    }
}

/// Why the guest program did not compile.
enum CompileFailure {
    /// A syntax error: its name, its message and the stack QuickJS gave it.
    Syntax {
        name: String,
        message: String,
        stack: String,
    },
    /// Anything else, already a wire error.
    Other(ErrorBody),
}

/// Evaluates the compiled text, which must yield the guest's function; no guest code runs
/// here.
fn compile<'js>(ctx: &Ctx<'js>, compiled: &Compiled) -> Result<Value<'js>, CompileFailure> {
    let mut options = EvalOptions::default();
    options.strict = false;
    options.filename = Some(GUEST_FILENAME.into());
    ctx.eval_with_options::<Value, _>(compiled.text.as_str(), options)
        .map_err(|e| match e {
            rquickjs::Error::Exception => {
                let thrown = ctx.catch();
                let (name, message, stack) = match thrown.as_object() {
                    Some(error) => (
                        error.get::<_, String>("name").unwrap_or_default(),
                        error.get::<_, String>("message").unwrap_or_default(),
                        error.get::<_, String>("stack").unwrap_or_default(),
                    ),
                    None => (String::new(), format!("{thrown:?}"), String::new()),
                };
                CompileFailure::Syntax {
                    name,
                    message,
                    stack,
                }
            }
            other => {
                CompileFailure::Other(engine_failure(ctx, other, "compiling the guest program"))
            }
        })
}

/// The `stack` of a thrown error object (QuickJS's interrupt is one, its stack an own data
/// property); `None` for any other value.
fn stack_of(thrown: &Value<'_>) -> Option<String> {
    thrown.as_exception()?.get::<_, String>("stack").ok()
}

/// Turns an engine error into a wire error, describing a thrown value like the guest's own.
fn engine_failure(ctx: &Ctx<'_>, error: rquickjs::Error, doing: &str) -> ErrorBody {
    if !matches!(error, rquickjs::Error::Exception) {
        return ErrorBody::new(ErrorCode::InternalError, format!("{doing}: {error}"));
    }
    let thrown = ctx.catch();
    describe(ctx, thrown, None)
}

/// `[code, message]` of a thrown value, via the trusted `describe` in bootstrap.js.
fn describe<'js>(
    ctx: &Ctx<'js>,
    reason: Value<'js>,
    locator: Option<&LazyLocator<'_>>,
) -> ErrorBody {
    let described = ctx.userdata::<Hooks>().and_then(|hooks| {
        let described: Array = hooks.describe.call((reason,)).ok()?;
        error_body(&described, 0, locator)
    });
    described.unwrap_or_else(|| {
        let _ = ctx.catch();
        ErrorBody::new(
            ErrorCode::RuntimeError,
            "guest code threw a value that cannot be described",
        )
    })
}

/// The guest's outcome once its promise settled: `None` while pending.
fn poll_outcome(
    ctx: &Ctx<'_>,
    locator: Option<&LazyLocator<'_>>,
) -> Option<Result<Option<Box<RawValue>>, ErrorBody>> {
    let hooks = ctx.userdata::<Hooks>()?;
    let polled: Value = match hooks.poll.call(()) {
        Ok(v) => v,
        Err(_) => {
            let _ = ctx.catch();
            return Some(Err(ErrorBody::new(
                ErrorCode::InternalError,
                "cannot read the guest's outcome",
            )));
        }
    };
    let array = polled.into_array()?;
    let kind: String = array.get(0).ok()?;
    if kind == "ok" {
        let json: Option<String> = array.get(1).ok()?;
        return Some(match json {
            None => Ok(None),
            Some(text) => RawValue::from_string(text).map(Some).map_err(|e| {
                ErrorBody::new(
                    ErrorCode::SerializationError,
                    format!("Guest code returned a non-serializable value ({e})"),
                )
            }),
        });
    }
    Some(Err(error_body(&array, 1, locator)?))
}

/// The longest error name kept: a guest sets it, and it is a name, not a message.
const MAX_NAME_CHARS: usize = 200;

/// `name` cut to [`MAX_NAME_CHARS`], the cut marked with `…`.
fn shortened(name: String) -> String {
    match name.char_indices().nth(MAX_NAME_CHARS) {
        Some((at, _)) => format!("{}…", &name[..at]),
        None => name,
    }
}

/// The error of a `describe` array from `at`: `[code, message, name, stack]`. An uncaught
/// guest error (`runtime_error`) gets its name and the location of its innermost guest frame;
/// a trusted code keeps the host's message as it is.
/// Longest refusal reason carried to the host (a word like `rate_limited`).
const MAX_REASON_CHARS: usize = 64;
/// Largest retry time carried, as JavaScript numbers count exactly (2^53 - 1).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

fn error_body(
    described: &Array<'_>,
    at: usize,
    locator: Option<&LazyLocator<'_>>,
) -> Option<ErrorBody> {
    let code: String = described.get(at).ok()?;
    let message: String = described.get(at + 1).ok()?;
    let code = ErrorCode::parse(&code).unwrap_or(ErrorCode::RuntimeError);
    let mut error = ErrorBody::new(code, message);
    if code != ErrorCode::RuntimeError {
        // A trusted refusal keeps its reason and retry time.
        error.reason = described
            .get::<Option<String>>(at + 4)
            .ok()
            .flatten()
            .filter(|r| !r.is_empty() && r.len() <= MAX_REASON_CHARS);
        let retry: Option<f64> = described.get(at + 5).ok().flatten();
        error.retry_after_ms = retry
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| ms.min(MAX_SAFE_INTEGER) as u64);
        let status: Option<f64> = described.get(at + 6).ok().flatten();
        error.status = status
            .filter(|s| s.fract() == 0.0 && (100.0..=599.0).contains(s))
            .map(|s| s as u16);
        return Some(error);
    }
    let name: Option<String> = described.get(at + 2).ok().flatten();
    if let Some(name) = name.filter(|n| !n.is_empty()) {
        error = error.with_name(shortened(name));
    }
    let stack: Option<String> = described.get(at + 3).ok().flatten();
    Some(match locator {
        Some(locator) => locator
            .get()
            .locate(error, stack.as_deref().unwrap_or_default()),
        None => error,
    })
}
