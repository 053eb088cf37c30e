//! The on-disk layout of a pack, byte by byte (see `docs/pack-format.md`).
//!
//! Everything is little-endian. Offsets are absolute file offsets (`u64`), so a
//! pack has no 4 GiB limit. Records have fixed sizes so that the server indexes
//! them directly in the mapping without parsing anything at open.

/// First eight bytes of every pack.
pub const MAGIC: [u8; 8] = *b"KILNPACK";
/// Bumped on any incompatible change of this file.
pub const VERSION: u32 = 5;
/// Size of the fixed header at offset 0.
pub const HEADER_LEN: usize = 288;
/// The header checksum covers bytes `0..HEADER_CHECKSUM_AT`.
pub const HEADER_CHECKSUM_AT: usize = 280;

/// Sections, in the order of the header's section table (not file order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// Fixed-size route records (`ROUTE_LEN` each).
    Routes = 0,
    /// Open-addressing hash table of `u64` slots pointing at routes.
    Slots = 1,
    /// Fixed-size variant records (`VARIANT_LEN` each).
    Variants = 2,
    /// Fixed-size redirect-rule records (`RULE_LEN` each), in file order.
    Rules = 3,
    /// De-duplicated byte strings: route keys, header blocks, rule patterns.
    Blobs = 4,
    /// De-duplicated response bodies, each contiguous.
    Bodies = 5,
    /// Fixed-size provenance records (`PROVENANCE_LEN` each): how each
    /// encoded body was made, so that the next build can reuse it.
    Provenance = 6,
}

pub const SECTION_COUNT: usize = 7;
pub const SECTIONS: [Section; SECTION_COUNT] = [
    Section::Routes,
    Section::Slots,
    Section::Variants,
    Section::Rules,
    Section::Blobs,
    Section::Bodies,
    Section::Provenance,
];

impl Section {
    pub fn name(self) -> &'static str {
        match self {
            Section::Routes => "routes",
            Section::Slots => "slots",
            Section::Variants => "variants",
            Section::Rules => "rules",
            Section::Blobs => "blobs",
            Section::Bodies => "bodies",
            Section::Provenance => "provenance",
        }
    }
}

// Header field offsets.
pub const H_MAGIC: usize = 0;
pub const H_VERSION: usize = 8;
pub const H_HEADER_LEN: usize = 12;
pub const H_FILE_LEN: usize = 16;
pub const H_ROUTE_COUNT: usize = 24;
pub const H_SLOT_COUNT: usize = 32;
pub const H_VARIANT_COUNT: usize = 40;
pub const H_RULE_COUNT: usize = 48;
pub const H_NOT_FOUND: usize = 56;
pub const H_FLAGS: usize = 64;
/// Section table: `SECTION_COUNT` entries of (offset u64, length u64, xxh3 u64).
pub const H_SECTIONS: usize = 72;
pub const SECTION_ENTRY_LEN: usize = 24;
/// Number of provenance records (u64), after the section table.
pub const H_PROVENANCE_COUNT: usize = 240;
/// The site's shared HPACK fields (`hpack::SharedTable::encode`): absolute
/// offset (u64) in the blobs section and length (u32); both zero when the
/// pack has none. 264..280 reserved, zero.
pub const H_SHARED_OFF: usize = 248;
pub const H_SHARED_LEN: usize = 256;

/// Header flag: at least one `_redirects` rule is forced (`!`) and has a
/// pattern, so rules must be consulted before the exact lookup.
pub const FLAG_FORCED_RULES: u64 = 1;

/// `not_found` value when the pack has no 404 page.
pub const NO_ROUTE: u64 = u64::MAX;

// Route record: 32 bytes.
pub const ROUTE_LEN: usize = 32;
pub const R_KEY_OFF: usize = 0; // u64
pub const R_KEY_LEN: usize = 8; // u32
pub const R_VARIANT_FIRST: usize = 12; // u32
pub const R_LAST_MODIFIED: usize = 16; // i64 unix seconds
pub const R_STATUS: usize = 24; // u16
pub const R_ENCODINGS: usize = 26; // u8 bit set of `Encoding::bit`
pub const R_KIND: usize = 27; // u8 `RouteKind`
pub const R_FLAGS: usize = 28; // u16
/// Delta variants (`Encoding::Dcb`, `Encoding::Dcz`) stored after the plain
/// ones, sorted by (dictionary hash, encoding).
pub const R_DELTA_COUNT: usize = 30; // u16

/// Route flag: conditional requests and ranges apply (a stored 200 resource).
pub const RF_VALIDATORS: u16 = 1;
/// Route flag: its delta variants carry `Access-Control-Allow-Origin: *`,
/// so a cross-origin page may read them (RFC 9842 §7.2): a delta may
/// answer a cross-origin no-cors request.
pub const RF_CORS_READABLE: u16 = 2;

// Variant record: 128 bytes, every field at a multiple of its size; HTTP/1
// reads the first 64 only.
pub const VARIANT_LEN: usize = 128;
pub const V_BODY_OFF: usize = 0; // u64
pub const V_BODY_LEN: usize = 8; // u64
pub const V_HEAD_OFF: usize = 16; // u64
pub const V_HEAD_LEN: usize = 24; // u32
pub const V_REPR_AT: usize = 28; // u32
pub const V_LENGTH_AT: usize = 32; // u32
pub const V_ETAG_AT: usize = 36; // u32
pub const V_ETAG_LEN: usize = 40; // u16
pub const V_ENCODING: usize = 42; // u8
pub const V_OVERRIDES: usize = 43; // u8 bit set over `SERVER_HEADERS`
pub const V_HPACK_LEN: usize = 44; // u32
pub const V_HPACK_OFF: usize = 48; // u64
pub const V_HPACK_REPR_AT: usize = 56; // u32
pub const V_HPACK_LENGTH_AT: usize = 60; // u32
/// Where the HPACK block has fields of the pack's shared set: absolute
/// offset (u64) of `hpack::SPAN_LEN`-byte records, and their count (u32);
/// 76..80 reserved, zero.
pub const V_SPANS_OFF: usize = 64; // u64
pub const V_SPANS_COUNT: usize = 72; // u32
/// The same fields as a QPACK field section's lines for HTTP/3, without
/// the section prefix (RFC 9204 §4.5): absolute offset (u64) and length
/// (u32), then `repr_at` and `length_at` in it (u16 each: 64 KiB before
/// `content-length` is far past what any peer's field section limit
/// takes).
pub const V_QPACK_OFF: usize = 80; // u64
pub const V_QPACK_LEN: usize = 88; // u32
pub const V_QPACK_REPR_AT: usize = 92; // u16
pub const V_QPACK_LENGTH_AT: usize = 94; // u16
/// A delta variant's dictionary: the SHA-256 of the identity bytes it was
/// compressed against (RFC 9842 `Available-Dictionary`); zero for a plain
/// variant.
pub const V_DICTIONARY: usize = 96; // [u8; 32]

/// Headers the server adds to every response on its own (security headers,
/// HSTS), lower-case. A variant's `overrides` bit `i` says its block already
/// sets `SERVER_HEADERS[i]` (from `_headers`): the server then leaves its own
/// line out, so the site's value wins and no field is sent twice.
pub const SERVER_HEADERS: [&str; 7] = [
    "x-content-type-options",
    "referrer-policy",
    "x-frame-options",
    "x-xss-protection",
    "cross-origin-opener-policy",
    "strict-transport-security",
    "alt-svc",
];

/// The `overrides` bit set of a header block.
pub fn server_header_overrides(block: &[u8]) -> u8 {
    let mut set = 0u8;
    for line in block.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = &line[..colon];
        for (i, known) in SERVER_HEADERS.iter().enumerate() {
            if name.eq_ignore_ascii_case(known.as_bytes()) {
                set |= 1 << i;
            }
        }
    }
    set
}

// Rule record: 32 bytes.
pub const RULE_LEN: usize = 32;
pub const U_FROM_OFF: usize = 0; // u64
pub const U_FROM_LEN: usize = 8; // u32
pub const U_TO_LEN: usize = 12; // u32
pub const U_TO_OFF: usize = 16; // u64
pub const U_STATUS: usize = 24; // u16
pub const U_FORCE: usize = 26; // u8

// Provenance record: 96 bytes, one per (source content, encoding) a build
// tried; sorted by (source hash, encoding), each pair once.
pub const PROVENANCE_LEN: usize = 96;
pub const P_SOURCE_HASH: usize = 0; // [u8; 32] BLAKE3 of the identity bytes
pub const P_BODY_HASH: usize = 32; // [u8; 32] BLAKE3 of the encoded body; zero if not kept
pub const P_BODY_OFF: usize = 64; // u64; zero if not kept
pub const P_BODY_LEN: usize = 72; // u64; zero if not kept
pub const P_SETTINGS: usize = 80; // u64 fingerprint of the encoder and its settings
pub const P_ENCODING: usize = 88; // u8, never identity
pub const P_KEPT: usize = 89; // u8: 1 stored, 0 tried and not worth keeping
// 90..96 reserved, zero.

/// Which table a route key lives in. The kind seeds the hash, so the same key
/// may exist once per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    /// A request path that matches exactly (`/a/b.html`, `/a/`, `/a`).
    Exact = 0,
    /// The fallback for every miss under a directory; the key is the
    /// directory with a trailing slash (`/a/`), the deepest one wins.
    Wildcard = 1,
    /// The not-found page; not in the hash table, found via the header.
    NotFound = 2,
}

impl RouteKind {
    pub fn from_u8(v: u8) -> Option<RouteKind> {
        match v {
            0 => Some(RouteKind::Exact),
            1 => Some(RouteKind::Wildcard),
            2 => Some(RouteKind::NotFound),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            RouteKind::Exact => "exact",
            RouteKind::Wildcard => "wildcard",
            RouteKind::NotFound => "not-found",
        }
    }
}

/// A content coding a variant is stored in. The discriminant is the order in
/// which a route's plain variants are stored; the delta codings (RFC 9842)
/// follow them, one per dictionary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Encoding {
    Identity = 0,
    Br = 1,
    Zstd = 2,
    Gzip = 3,
    /// Brotli against a dictionary the client holds (RFC 9842 §4.1).
    Dcb = 4,
    /// Zstandard against a dictionary the client holds (RFC 9842 §4.2).
    Dcz = 5,
}

/// The plain encodings: those `Accept-Encoding` alone selects and the
/// route's `encodings` bit set holds.
pub const ENCODINGS: [Encoding; 4] = [
    Encoding::Identity,
    Encoding::Br,
    Encoding::Zstd,
    Encoding::Gzip,
];

/// The delta encodings, chosen only for a request naming the dictionary.
pub const DELTA_ENCODINGS: [Encoding; 2] = [Encoding::Dcb, Encoding::Dcz];

/// Every encoding, in discriminant order: plain, then delta.
pub const ALL_ENCODINGS: [Encoding; 6] = [
    Encoding::Identity,
    Encoding::Br,
    Encoding::Zstd,
    Encoding::Gzip,
    Encoding::Dcb,
    Encoding::Dcz,
];

impl Encoding {
    pub fn from_u8(v: u8) -> Option<Encoding> {
        ALL_ENCODINGS.get(v as usize).copied()
    }
    pub fn bit(self) -> u8 {
        1 << (self as u8)
    }
    /// A delta coding: its body needs a dictionary to decode.
    pub fn is_delta(self) -> bool {
        matches!(self, Encoding::Dcb | Encoding::Dcz)
    }
    /// The `Content-Encoding` / `Accept-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Identity => "identity",
            Encoding::Br => "br",
            Encoding::Zstd => "zstd",
            Encoding::Gzip => "gzip",
            Encoding::Dcb => "dcb",
            Encoding::Dcz => "dcz",
        }
    }
    /// A plain encoding by its token, in any case (delta tokens are not
    /// plain). Bytes, as requests carry it: no UTF-8 check per request.
    pub fn from_token(t: &[u8]) -> Option<Encoding> {
        ENCODINGS
            .iter()
            .copied()
            .find(|e| e.token().as_bytes().eq_ignore_ascii_case(t))
    }
}

/// Seed of the key hash for a route kind.
pub fn key_hash(kind: RouteKind, key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, kind as u64)
}

/// A slot holds the high 32 bits of the key hash and `route index + 1`;
/// zero means empty.
pub fn slot_value(hash: u64, route: u32) -> u64 {
    (hash & 0xFFFF_FFFF_0000_0000) | (route as u64 + 1)
}

/// Number of slots for `n` hashed routes: a power of two, load ≤ 1/2.
pub fn slot_count_for(n: usize) -> usize {
    (n.max(1) * 2).next_power_of_two()
}

pub fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
pub fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
