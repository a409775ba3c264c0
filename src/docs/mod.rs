//! How gapless works and what it promises, at more length than the API
//! reference: pages of text, no items.
//!
//! The crate root and each type's docs say how to *use* the engine. These
//! pages say what it guarantees, what it costs, and why the lock-free
//! protocol behind [`Ring`](crate::Ring) and [`Writer`](crate::Writer) is
//! correct, with the numbers the code uses. Read them in this order:
//!
//! 1. [`guarantees`]: what a ring promises: every guarantee, stated
//!    exactly, and where each is tested.
//! 2. [`memory`]: what you configure is what it costs: how [`Config`]
//!    becomes memory, what is resident when, and the allocator caveat that
//!    capacity plans must know.
//! 3. [`progress`]: who waits for whom, and when: the one case where an
//!    emitter waits, and why nothing between an emitter's claim and its
//!    publish can panic.
//! 4. [`protocol`]: the layout (index, arena, claim word, watermark), the
//!    shared emit, the single writer, and how readers validate what they
//!    copied.
//! 5. [`copy`]: the byte-wise atomic copy of payload bytes: the crate's
//!    only `unsafe` code, and the argument that it is no data race.
//! 6. [`proof`]: how all of the above is checked: loom models, Miri,
//!    ThreadSanitizer, the proptest model, fuzzing and the stress tests.
//!
//! The source files of the engine's private modules (`src/emit.rs`,
//! `src/read.rs`, …) carry short summaries that point back here.
//!
//! [`Config`]: crate::Config

pub mod copy;
pub mod guarantees;
pub mod memory;
pub mod progress;
pub mod proof;
pub mod protocol;
