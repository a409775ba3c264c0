//! What you configure is what it costs: how a [`Config`] becomes memory,
//! and when that memory is resident.
//!
//! # The footprint
//!
//! A ring preallocates two blocks when it is built, and never grows,
//! shrinks or moves them:
//!
//! - **The index**: one slot of
//!   [`BYTES_PER_EVENT`](crate::config::BYTES_PER_EVENT) (32) bytes per
//!   retained event. `events(n)` is `n` slots, except that from 64 up `n`
//!   is rounded up to a multiple of 4 (at most 3 more, under 5%), so that
//!   neighbouring seqs' slots can sit on different cache lines. The block
//!   has 24 bytes more, so that the slots can start on a 32-byte boundary.
//! - **The arena**: the payload memory. `bytes(b)` is `b` bytes, rounded
//!   up to a whole 8-byte word (at most 7 more). Nothing is doubled and
//!   nothing is rounded to a power of two: slots and arena words are
//!   indexed by `seq mod events` and `position mod words`, with a mask when
//!   the length is a power of two and a remainder otherwise.
//!
//! [`Geometry::footprint`] is the sum: `events × 32 + 24 + bytes`, with the
//! [`Geometry`]'s (rounded) `events` and `bytes`. Over what was asked that
//! is at most 3 slots, 7 bytes and the 24 of alignment, within 10% of the
//! request for any ring of 320 bytes or more. A capacity plan multiplies
//! what it configured:
//!
//! ```
//! use gapless::Config;
//! let g = Config::default().geometry()?; // 1024 events, 1 MiB
//! assert_eq!(g.footprint(), 1024 * 32 + 24 + (1 << 20)); // 1,081,368 bytes
//! // 10,000 such rings preallocate 10,813,680,000 bytes (about 10.1 GiB).
//! assert_eq!(10_000 * g.footprint(), 10_813_680_000);
//! let g = Config::default().events(1000).bytes(3001).geometry()?;
//! assert_eq!((g.events(), g.bytes()), (1000, 3008)); // 3001 rounded to a word
//! # Ok::<(), gapless::ConfigError>(())
//! ```
//!
//! Outside the footprint, and independent of the configuration: the
//! [`Ring`] value itself (its three counters and the notifier's waiter
//! count each padded to 128 bytes against false sharing; under 1 KiB on
//! x86-64), one
//! [`Waker`](std::task::Waker) per async follower registered at the
//! moment, and what readers allocate for what they return (below).
//!
//! # What the footprint holds
//!
//! The reserve comes out of both halves of the configuration, never on top
//! of them:
//!
//! | figure | value | [`Geometry`] method |
//! | --- | --- | --- |
//! | events retained while the watermark moves | all slots, as far as the arena holds their records | [`events`](crate::Geometry::events) |
//! | events retained while an emitter is stalled | half the slots, rounded down | [`stalled_retained_events`](crate::Geometry::stalled_retained_events) |
//! | bytes of records retained while an emitter is stalled | half the arena, rounded down to a word | [`stalled_retained_bytes`](crate::Geometry::stalled_retained_bytes) |
//! | largest payload (and largest batch, in padded bytes) | the other half of the arena | [`max_payload`](crate::Geometry::max_payload) |
//! | most seqs an emitter may run ahead of the watermark | the other half of the slots | [`window`](crate::Geometry::window) |
//!
//! A record takes its length rounded up to 8 bytes (an empty payload takes
//! a slot and no arena bytes). So a ring that should retain `n` events of
//! up to `p` bytes needs `events(n)` and `bytes(n × p')`, `p'` being `p`
//! rounded up to a multiple of 8, and at least `bytes(2 × p)` to accept
//! such a payload at all. The largest payload is half the arena because a
//! payload must fit in the window of words an emitter may write ahead of
//! the published records: that is what lets the lowest unpublished emitter
//! always proceed ([`progress`](super::progress)).
//!
//! # Readers
//!
//! A replay allocates its answer: one buffer holding the copied run of
//! records (at most the arena, shared by the returned events' payloads as
//! one [`Bytes`](bytes::Bytes) allocation) and the `Vec` of events. Nothing
//! a reader allocates outlives what it returns; nothing it does changes
//! the ring's memory.
//!
//! # Residency: allocated in full, resident as written
//!
//! Both blocks are allocated zeroed (the allocator's `alloc_zeroed`,
//! through `bytemuck`, so the engine needs no `unsafe` for it). The system
//! allocator serves large blocks with fresh pages from the OS (`calloc` →
//! `mmap`), which read as zero without being written and become resident
//! only when first written. So an idle ring costs the pages its few events
//! touched, not its footprint; a busy one becomes resident up to its
//! footprint and never beyond (`tests/resident_memory.rs` measures both).
//! Writing each word at construction instead would make every ring
//! resident in full at once. For the same reason the slots are plain
//! 8-byte words aligned by skipping up to 3 of them, not a type aligned to
//! 32: the system allocator zeroes blocks aligned to more than 16 bytes by
//! writing them.
//!
//! **Fresh pages are the allocator's to give, and glibc's stops giving
//! them under churn.** glibc's `calloc` takes fresh pages for blocks above
//! its mmap threshold (128 KiB by default) and from a freshly grown heap.
//! Below the threshold a block may be reused heap memory, which `calloc`
//! zeroes by writing: a ring with a footprint under 128 KiB can be resident
//! in full at once (it is small). Worse, when a block above the threshold
//! is freed, glibc raises the threshold to that block's size (up to 32 MiB
//! on 64-bit targets) and serves later blocks of that size from its heap,
//! zeroed by writing: in a process that drops rings and creates others,
//! each new idle ring is then resident in full (`benches/memory.rs`
//! measures churn). A process that churns rings fixes the threshold, which
//! also turns off that adjustment (`MALLOC_MMAP_THRESHOLD_=131072` in the
//! environment, or `mallopt(M_MMAP_THRESHOLD, …)` at start-up), or uses
//! an allocator that zeroes large blocks by returning pages to the OS.
//!
//! With transparent huge pages set to `always` (rather than the usual
//! `madvise`), the kernel may back a ring's first write with a 2 MiB page,
//! so an idle ring may be resident by up to that much.
//!
//! [`Config`]: crate::Config
//! [`Geometry`]: crate::Geometry
//! [`Geometry::footprint`]: crate::Geometry::footprint
//! [`Ring`]: crate::Ring
