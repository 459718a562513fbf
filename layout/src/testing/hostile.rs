//! Hostile bytes for the property tests of gaffer's decoders (feature
//! `testing`): everything gaffer reads back from a store was written by
//! someone else, and must decode to a typed error or a valid value, never
//! a panic, a hang or an allocation as large as a length field claims.
//!
//! Three tools, free of any property-testing crate (the tests bring their
//! own, `proptest`, and build [`Mutation`]s with it):
//!
//! - mutations of a valid encoding: bit flips, bytes overwritten, cut,
//!   inserted and appended, and MessagePack length headers (array, map,
//!   str, bin, ext) rewritten to claim `u32::MAX` items or bytes
//!   ([`mutate`], [`length_bombs`], found by walking the encoding:
//!   [`headers`]);
//! - an allocation meter for the current thread ([`measure`]), fed by a
//!   global allocator a test binary installs with
//!   [`count_allocations!`](crate::count_allocations);
//! - a watchdog ([`within`]): a decode that does not return in its time
//!   fails the test with its input instead of hanging it.
//!
//! ```
//! use gaffer_layout::testing::hostile::{self, Mutation};
//! let valid = rmp_serde::to_vec_named(&vec!["a".to_string()]).unwrap();
//! let bombs = hostile::length_bombs(&valid);
//! // The array's header and the string's, each claiming 4 GiB.
//! assert_eq!(bombs.len(), 2);
//! assert!(rmp_serde::from_slice::<Vec<String>>(&bombs[0]).is_err());
//! let cut = hostile::mutate(&valid, &[Mutation::Truncate { at: 2 }]);
//! assert_eq!(cut.len(), 2);
//! ```

use std::cell::Cell;
use std::time::Duration;

/// What a length header counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderKind {
    /// An array: items follow.
    Array,
    /// A map: key-value pairs follow.
    Map,
    /// A string: bytes follow.
    Str,
    /// A binary: bytes follow.
    Bin,
    /// An extension: a type byte and data bytes follow.
    Ext,
}

/// A length-bearing header of a MessagePack encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Offset of its marker byte.
    pub at: usize,
    /// Its bytes (the marker and the length field).
    pub size: usize,
    /// What it counts.
    pub kind: HeaderKind,
}

/// The length headers of the MessagePack values in `bytes`, in order, as
/// far as they parse (a walk of the encoding, not a decode: no value is
/// built).
pub fn headers(bytes: &[u8]) -> Vec<Header> {
    let mut out = Vec::new();
    let mut at = 0;
    // Values still to read: containers add theirs. Bounded by the input,
    // since every value takes at least one byte.
    let mut pending: u64 = 1;
    while pending > 0 && at < bytes.len() {
        pending -= 1;
        let Some(step) = value_head(bytes, at) else {
            break;
        };
        if let Some(kind) = step.kind {
            out.push(Header {
                at,
                size: step.head,
                kind,
            });
        }
        pending = pending.saturating_add(step.items);
        at = match at
            .checked_add(step.head)
            .and_then(|a| a.checked_add(step.data))
        {
            Some(next) => next,
            None => break,
        };
    }
    out
}

/// One value's head: its header bytes, the data bytes that follow, the
/// values it contains, and the kind of its length header if it has one.
struct Head {
    head: usize,
    data: usize,
    items: u64,
    kind: Option<HeaderKind>,
}

fn value_head(bytes: &[u8], at: usize) -> Option<Head> {
    let marker = *bytes.get(at)?;
    let be = |n: usize| -> Option<u64> {
        let field = bytes.get(at + 1..at + 1 + n)?;
        Some(field.iter().fold(0u64, |v, b| v << 8 | u64::from(*b)))
    };
    let plain = |head: usize| {
        Some(Head {
            head,
            data: 0,
            items: 0,
            kind: None,
        })
    };
    let sized = |n: usize, kind: HeaderKind| -> Option<Head> {
        let len = usize::try_from(be(n)?).ok()?;
        Some(Head {
            head: 1 + n,
            data: if kind == HeaderKind::Ext {
                len + 1
            } else {
                len
            },
            items: 0,
            kind: Some(kind),
        })
    };
    let container = |n: usize, kind: HeaderKind| -> Option<Head> {
        let len = be(n)?;
        Some(Head {
            head: 1 + n,
            data: 0,
            items: if kind == HeaderKind::Map {
                len * 2
            } else {
                len
            },
            kind: Some(kind),
        })
    };
    match marker {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => plain(1),
        0x80..=0x8f => Some(Head {
            head: 1,
            data: 0,
            items: u64::from(marker & 0x0f) * 2,
            kind: Some(HeaderKind::Map),
        }),
        0x90..=0x9f => Some(Head {
            head: 1,
            data: 0,
            items: u64::from(marker & 0x0f),
            kind: Some(HeaderKind::Array),
        }),
        0xa0..=0xbf => Some(Head {
            head: 1,
            data: usize::from(marker & 0x1f),
            items: 0,
            kind: Some(HeaderKind::Str),
        }),
        0xc4 => sized(1, HeaderKind::Bin),
        0xc5 => sized(2, HeaderKind::Bin),
        0xc6 => sized(4, HeaderKind::Bin),
        0xc7 => sized(1, HeaderKind::Ext),
        0xc8 => sized(2, HeaderKind::Ext),
        0xc9 => sized(4, HeaderKind::Ext),
        0xca => plain(5),
        0xcb => plain(9),
        0xcc | 0xd0 => plain(2),
        0xcd | 0xd1 => plain(3),
        0xce | 0xd2 => plain(5),
        0xcf | 0xd3 => plain(9),
        // fixext 1, 2, 4, 8, 16: a type byte and the data.
        0xd4..=0xd8 => plain(2 + (1 << (marker - 0xd4))),
        0xd9 => sized(1, HeaderKind::Str),
        0xda => sized(2, HeaderKind::Str),
        0xdb => sized(4, HeaderKind::Str),
        0xdc => container(2, HeaderKind::Array),
        0xdd => container(4, HeaderKind::Array),
        0xde => container(2, HeaderKind::Map),
        0xdf => container(4, HeaderKind::Map),
        // 0xc1 is never used.
        _ => None,
    }
}

/// `bytes` with `header` rewritten in its 32-bit form claiming `u32::MAX`
/// items (an array, a map) or bytes (a string, a binary, an extension's
/// data): 4 GiB claimed by a few bytes.
pub fn claim_huge(bytes: &[u8], header: &Header) -> Vec<u8> {
    let marker = match header.kind {
        HeaderKind::Array => 0xdd,
        HeaderKind::Map => 0xdf,
        HeaderKind::Str => 0xdb,
        HeaderKind::Bin => 0xc6,
        HeaderKind::Ext => 0xc9,
    };
    let at = header.at.min(bytes.len());
    let rest = (header.at + header.size).min(bytes.len());
    let mut out = Vec::with_capacity(bytes.len() + 5);
    out.extend_from_slice(&bytes[..at]);
    out.push(marker);
    out.extend_from_slice(&u32::MAX.to_be_bytes());
    out.extend_from_slice(&bytes[rest..]);
    out
}

/// `valid` once per length header, with that header claiming `u32::MAX`
/// ([`claim_huge`]).
pub fn length_bombs(valid: &[u8]) -> Vec<Vec<u8>> {
    headers(valid)
        .iter()
        .map(|h| claim_huge(valid, h))
        .collect()
}

/// One change to a valid encoding. Offsets are taken modulo the length of
/// the bytes they apply to, so any value applies to any input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Flip bit `bit % 8` of the byte at `at`.
    Flip {
        /// Offset.
        at: usize,
        /// Bit.
        bit: u8,
    },
    /// Overwrite the byte at `at`.
    Set {
        /// Offset.
        at: usize,
        /// The new byte.
        byte: u8,
    },
    /// Cut the bytes from `at` on (at `at % (len + 1)`).
    Truncate {
        /// Offset.
        at: usize,
    },
    /// Insert bytes at `at`.
    Insert {
        /// Offset.
        at: usize,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Append bytes.
    Append(Vec<u8>),
    /// Rewrite the `n`-th length header (of those found then, modulo
    /// their count) to claim `u32::MAX` ([`claim_huge`]).
    Huge {
        /// Which header.
        n: usize,
    },
    /// Insert a value nested `depth` arrays deep (one byte each, a nil
    /// inside) at `at`.
    Nest {
        /// Offset.
        at: usize,
        /// Arrays.
        depth: usize,
    },
    /// Add a field no record has (`"\u{1}"`) to a top-level map of up to
    /// 14 entries, its value nested `depth` arrays deep: what a reader
    /// skips, down to its bottom.
    UnknownField {
        /// Arrays.
        depth: usize,
    },
}

/// A value nested `depth` arrays deep: `[[[…nil…]]]`.
pub fn nested(depth: usize) -> Vec<u8> {
    let mut out = vec![0x91; depth];
    out.push(0xc0);
    out
}

/// `valid` with `mutations` applied in order.
pub fn mutate(valid: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = valid.to_vec();
    for m in mutations {
        let len = bytes.len();
        match m {
            Mutation::Flip { at, bit } if len > 0 => bytes[at % len] ^= 1 << (bit % 8),
            Mutation::Set { at, byte } if len > 0 => bytes[at % len] = *byte,
            Mutation::Flip { .. } | Mutation::Set { .. } => {}
            Mutation::Truncate { at } => bytes.truncate(at % (len + 1)),
            Mutation::Insert { at, bytes: more } => {
                let at = at % (len + 1);
                bytes.splice(at..at, more.iter().copied());
            }
            Mutation::Append(more) => bytes.extend_from_slice(more),
            Mutation::Huge { n } => {
                let found = headers(&bytes);
                if !found.is_empty() {
                    bytes = claim_huge(&bytes, &found[n % found.len()]);
                }
            }
            Mutation::Nest { at, depth } => {
                let at = at % (len + 1);
                bytes.splice(at..at, nested(*depth));
            }
            Mutation::UnknownField { depth } => {
                if let Some(first @ 0x80..=0x8e) = bytes.first().copied() {
                    bytes[0] = first + 1;
                    bytes.extend_from_slice(&[0xa1, 0x01]);
                    bytes.extend_from_slice(&nested(*depth));
                }
            }
        }
    }
    bytes
}

/// What the current thread allocated while [`measure`] ran its closure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allocated {
    /// Whether a meter was installed ([`count_allocations!`](crate::count_allocations)):
    /// without one every count is 0, and a test that asserts a bound
    /// checks this first.
    pub metered: bool,
    /// The largest single allocation (or reallocation's new size), bytes.
    pub largest: usize,
    /// Bytes allocated in all.
    pub total: usize,
    /// The most bytes held at once (allocated in the closure and not yet
    /// freed).
    pub peak: usize,
    /// Bytes held now (what it allocated and did not free, minus what it
    /// freed of earlier allocations).
    live: isize,
}

#[derive(Clone, Copy)]
struct Meter {
    installed: bool,
    on: bool,
    seen: Allocated,
}

thread_local! {
    static METER: Cell<Meter> = const {
        Cell::new(Meter {
            installed: false,
            on: false,
            seen: Allocated {
                metered: false,
                largest: 0,
                total: 0,
                peak: 0,
                live: 0,
            },
        })
    };
}

/// Told by the metering allocator of each allocation of `size` bytes on
/// this thread. Allocation-free.
pub fn allocated(size: usize) {
    let _ = METER.try_with(|m| {
        let mut meter = m.get();
        meter.installed = true;
        if meter.on {
            let s = &mut meter.seen;
            s.largest = s.largest.max(size);
            s.total = s.total.saturating_add(size);
            s.live = s
                .live
                .saturating_add(isize::try_from(size).unwrap_or(isize::MAX));
            s.peak = s.peak.max(usize::try_from(s.live).unwrap_or(0));
        }
        m.set(meter);
    });
}

/// Told by the metering allocator of each deallocation of `size` bytes on
/// this thread. Allocation-free.
pub fn freed(size: usize) {
    let _ = METER.try_with(|m| {
        let mut meter = m.get();
        if meter.on {
            let s = &mut meter.seen;
            s.live = s
                .live
                .saturating_sub(isize::try_from(size).unwrap_or(isize::MAX));
        }
        m.set(meter);
    });
}

/// Run `f` on this thread and count what it allocates. Measures nest
/// badly: the inner one resets the outer's counts.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, Allocated) {
    // An allocation (this Box) tells whether the meter is installed.
    drop(std::hint::black_box(Box::new(0u8)));
    METER.with(|m| {
        let mut meter = m.get();
        meter.on = true;
        meter.seen = Allocated::default();
        m.set(meter);
    });
    let out = f();
    let seen = METER.with(|m| {
        let mut meter = m.get();
        meter.on = false;
        m.set(meter);
        Allocated {
            metered: meter.installed,
            ..meter.seen
        }
    });
    (out, seen)
}

/// Install the allocation meter [`measure`] reads as the global allocator
/// of this test binary (the system allocator, counted). One line at the
/// top of a test file: `gaffer_layout::count_allocations!();`.
#[macro_export]
macro_rules! count_allocations {
    () => {
        /// The system allocator, counted per thread for
        /// `gaffer_layout::testing::hostile::measure`.
        struct MeteredSystem;

        // SAFETY: every call is passed unchanged to the system allocator;
        // the meter only counts sizes, in thread-local cells, without
        // allocating.
        unsafe impl ::std::alloc::GlobalAlloc for MeteredSystem {
            unsafe fn alloc(&self, layout: ::std::alloc::Layout) -> *mut u8 {
                $crate::testing::hostile::allocated(layout.size());
                // SAFETY: the caller's contract, passed on.
                unsafe { ::std::alloc::GlobalAlloc::alloc(&::std::alloc::System, layout) }
            }

            unsafe fn alloc_zeroed(&self, layout: ::std::alloc::Layout) -> *mut u8 {
                $crate::testing::hostile::allocated(layout.size());
                // SAFETY: the caller's contract, passed on.
                unsafe { ::std::alloc::GlobalAlloc::alloc_zeroed(&::std::alloc::System, layout) }
            }

            unsafe fn dealloc(&self, ptr: *mut u8, layout: ::std::alloc::Layout) {
                $crate::testing::hostile::freed(layout.size());
                // SAFETY: the caller's contract, passed on.
                unsafe { ::std::alloc::GlobalAlloc::dealloc(&::std::alloc::System, ptr, layout) }
            }

            unsafe fn realloc(
                &self,
                ptr: *mut u8,
                layout: ::std::alloc::Layout,
                new_size: usize,
            ) -> *mut u8 {
                $crate::testing::hostile::freed(layout.size());
                $crate::testing::hostile::allocated(new_size);
                // SAFETY: the caller's contract, passed on.
                unsafe {
                    ::std::alloc::GlobalAlloc::realloc(&::std::alloc::System, ptr, layout, new_size)
                }
            }
        }

        #[global_allocator]
        static METERED_SYSTEM: MeteredSystem = MeteredSystem;
    };
}

/// The stack of the threads [`within`] runs its work on: a tokio
/// worker's, where the engine, a client and the dashboard decode.
pub const WORKER_STACK: usize = 2 << 20;

/// Run `f` on a thread of its own, with a tokio worker's stack
/// ([`WORKER_STACK`]), and give its result, or panic (failing the test,
/// with `what` in the message) if it has not returned within `limit`: a
/// decoder that hangs fails its test instead of hanging it, one that
/// recurses too deep overflows the stack it would have in an engine. The
/// thread is left behind on a hang. A panic in `f` is raised again here.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: impl std::fmt::Display,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::Builder::new()
        .name("hostile-bytes".into())
        .stack_size(WORKER_STACK)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawning a test thread");
    match rx.recv_timeout(limit) {
        Ok(out) => {
            let _ = worker.join();
            out
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: no answer within {limit:?} (a hang)")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the worker sends before it ends"),
        },
    }
}
