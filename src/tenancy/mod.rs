//! Who may do what: tokens, their tenants and roles, and the actions each role grants
//! (`access`), and merchants' short-lived portal links (`portal`).

pub(crate) mod access;
pub mod portal;
