//! The pack: one read-only file holding a whole site, laid out so the server
//! answers a request from the mapping alone. `format` is the byte layout,
//! `writer` fires a pack (into `temp`'s file), `reader` serves from one, `verify` checks one.

pub mod format;
pub mod reader;
pub mod temp;
pub mod verify;
pub mod writer;

pub use format::{Encoding, RouteKind};
pub use reader::{FileStamp, Pack, PackError, Provenance, Route, Rule, Variant};
pub use writer::{
    BodyRef, BodyWriter, DeltaIn, HeadBlock, HeadBlockBuilder, PackStats, PackWriter, ProvenanceIn,
    RangeReader, RouteIn, RuleIn, VariantIn, VariantSet,
};

#[cfg(test)]
mod tests;
