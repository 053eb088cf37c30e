//! What a kiln process does to give up its rights, shared by the server's
//! sandbox (`serve::sandbox`) and the ACME worker's (`acme::sandbox`), so
//! that neither depends on the other: the user switch with every
//! capability dropped (`user.rs`, `capabilities.rs`) and the Landlock
//! ruleset each domain starts from (`landlock.rs`).

mod capabilities;
mod landlock;
mod supervise;
mod user;

pub use self::capabilities::lease_if_held;
pub use self::landlock::{LANDLOCK_ABI, deny_all_ruleset, landlock_error};
pub use self::supervise::{Worker, supervise};
pub use self::user::{Identity, resolve_user, switch_user};
