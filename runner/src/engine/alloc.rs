//! The sandbox allocator: counts every byte QuickJS allocates and refuses what exceeds the budget.
//!
//! QuickJS's own limit check returns NULL before the allocator is asked, leaving no trace of
//! why an allocation failed. Enforcing the limit here instead records the refusal in
//! [`Budget::exceeded`], so `memory_limit` is decided from the runtime's state, whatever the
//! guest made of the resulting exception (it may catch it, or throw `null` instead).
//!
//! A refusal is final for the execution: from then on every allocation that grows the heap
//! is refused too. Otherwise a guest that catches the error and lets the garbage collector
//! free its arrays could go on allocating megabytes per bytecode tick, and the interrupt
//! handler (polled every 10,000 ticks) would take seconds to stop it. With nothing left to
//! allocate, each tick is cheap and the handler ends the execution within milliseconds. The
//! handler then grants a small allowance ([`Budget::allow_unwinding`]) so QuickJS can build
//! its uncatchable "interrupted" error.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rquickjs::allocator::{Allocator, RustAllocator};

/// The memory budget of one sandbox, shared by its allocator, interrupt handler and engine.
#[derive(Debug)]
pub(crate) struct Budget {
    used: Cell<usize>,
    limit: Cell<usize>,
    exceeded: Cell<bool>,
    /// Bytes that may still be allocated after a refusal (see [`Budget::allow_unwinding`]).
    allowance: Cell<usize>,
    /// `exceeded`, seen from other threads (the watchdog).
    signal: Arc<AtomicBool>,
}

/// What [`Budget::allow_unwinding`] grants: enough for an error object, its message and a
/// stack trace of a few frames.
const UNWIND_ALLOWANCE: usize = 64 * 1024;

impl Budget {
    pub(crate) fn new(signal: Arc<AtomicBool>) -> Rc<Budget> {
        Rc::new(Budget {
            used: Cell::new(0),
            limit: Cell::new(usize::MAX),
            exceeded: Cell::new(false),
            allowance: Cell::new(0),
            signal,
        })
    }

    /// Arms the budget for an execution: from now on at most `limit` bytes may be live.
    pub(crate) fn arm(&self, limit: usize) {
        self.limit.set(limit);
        self.exceeded.set(false);
        self.allowance.set(0);
        self.signal.store(false, Ordering::Relaxed);
    }

    /// After a refusal, lets the engine allocate a little more, once per call: the interrupt
    /// handler calls it when it stops the guest, so the uncatchable error can be built.
    pub(crate) fn allow_unwinding(&self) {
        if self.exceeded.get() {
            self.allowance.set(UNWIND_ALLOWANCE);
        }
    }

    /// Lifts the limit (for tear-down, which must never fail) and keeps `exceeded`.
    pub(crate) fn lift(&self) {
        self.limit.set(usize::MAX);
    }

    /// Whether an allocation was refused since the last [`Budget::arm`].
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded.get()
    }

    fn admit(&self, old: usize, new: usize) -> bool {
        let next = self.used.get() - old + new;
        if new > old && self.limit.get() != usize::MAX {
            if self.exceeded.get() {
                // Refused since an earlier refusal, unless the allowance covers it.
                let grow = new - old;
                let Some(left) = self.allowance.get().checked_sub(grow) else {
                    return false;
                };
                self.allowance.set(left);
            } else if next > self.limit.get() {
                self.exceeded.set(true);
                self.signal.store(true, Ordering::Relaxed);
                return false;
            }
        }
        self.used.set(next);
        true
    }
}

/// [`RustAllocator`] with a byte budget in front of it.
pub(crate) struct BudgetAllocator {
    pub(crate) budget: Rc<Budget>,
}

// SAFETY: every method forwards to `RustAllocator` with the pointers QuickJS handed us,
// unchanged; the budget bookkeeping reads sizes through `RustAllocator::usable_size`, which
// is valid for any pointer that allocator returned and QuickJS has not yet freed.
#[allow(unsafe_code)]
unsafe impl Allocator for BudgetAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !self.budget.admit(0, size) {
            return std::ptr::null_mut();
        }
        let ptr = RustAllocator.alloc(size);
        if ptr.is_null() {
            self.budget.admit(size, 0);
        } else {
            // SAFETY: `ptr` was just returned by RustAllocator.
            let real = unsafe { RustAllocator::usable_size(ptr) };
            self.budget.used.set(self.budget.used.get() - size + real);
        }
        ptr
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size) else {
            return std::ptr::null_mut();
        };
        if !self.budget.admit(0, total) {
            return std::ptr::null_mut();
        }
        let ptr = RustAllocator.calloc(count, size);
        if ptr.is_null() {
            self.budget.admit(total, 0);
        } else {
            // SAFETY: `ptr` was just returned by RustAllocator.
            let real = unsafe { RustAllocator::usable_size(ptr) };
            self.budget.used.set(self.budget.used.get() - total + real);
        }
        ptr
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        // SAFETY: QuickJS frees only pointers this allocator returned.
        let size = unsafe { RustAllocator::usable_size(ptr) };
        self.budget.used.set(self.budget.used.get() - size);
        // SAFETY: as above.
        unsafe { RustAllocator.dealloc(ptr) }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        // SAFETY: QuickJS reallocates only pointers this allocator returned.
        let old = unsafe { RustAllocator::usable_size(ptr) };
        if !self.budget.admit(old, new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above; on failure the old block stays valid and accounted as `new_size`.
        let next = unsafe { RustAllocator.realloc(ptr, new_size) };
        if next.is_null() {
            self.budget.admit(new_size, old);
        } else {
            // SAFETY: `next` was just returned by RustAllocator.
            let real = unsafe { RustAllocator::usable_size(next) };
            self.budget
                .used
                .set(self.budget.used.get() - new_size + real);
        }
        next
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: forwarded unchanged.
        unsafe { RustAllocator::usable_size(ptr) }
    }
}
