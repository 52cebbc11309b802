//! Domain types that validate on construction, so that an invalid notification cannot
//! exist past the API boundary: ids, callback URLs and their endpoints, schedules, request headers, payloads,
//! tenants, labels, the record of one attempt and the history it is kept in.

mod attempt;
mod callback_url;
mod endpoint;
mod error;
mod headers;
mod history;
mod idempotency;
mod job_id;
mod json;
mod label;
mod notification;
mod ordering_key;
mod payload;
mod placement;
mod record_id;
mod schedule;
mod success;
mod tenant;
mod topic;

pub use attempt::{
    kept_headers, truncate, Attempt, AttemptReport, Outcome, Reach, MAX_RESPONSE_BYTES,
};
pub use callback_url::{CallbackUrl, Destinations};
pub use endpoint::{record_key as endpoint_key, Endpoint, EndpointId};
pub use error::FieldError;
pub use headers::{headers_after_change, shown_value, ExtraHeaders};
pub use history::{
    Began, Cycle, Cycles, Ended, Entry, Note, NoteKind, CIRCUIT_DEADLINE, CIRCUIT_OPEN,
};
pub use idempotency::{Fingerprint, IdempotencyKey};
pub use job_id::JobId;
pub(crate) use job_id::BASE62;
pub use json::{canonical_json, check_nesting, RawJson, MAX_NESTING};
pub use label::{check_label, invisible};
pub use notification::{JobSpec, Notification, Target};
pub use ordering_key::OrderingKey;
pub use payload::Payload;
pub use placement::{Degraded, PlacedBy, Placement, ShardHealth, ShardUnavailable};
pub use record_id::{EventId, SubscriptionId};
pub use schedule::{duration_text, parse_duration, rfc3339, Schedule, DURATION_FORM, MAX_TIERS};
pub use success::{BodyRule, RawSuccess, SuccessRule};
pub use tenant::{HostAllowList, Tenant};
pub use topic::{Topic, TopicPattern};
