//! Which primary the sentinels agree on. An address is followed only when a strict
//! majority of the configured sentinels name it: counted against every sentinel listed,
//! silent ones included, so that neither a sentinel in the minority, nor the order of
//! the list, nor sentinels that stopped answering can choose it. With no majority, none
//! is; `Poll` also says how they split, for the log and the error, and `Agreement` when
//! a split begins and ends, so that it is told once.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::config::NodeAddress;

/// What one configured sentinel said when asked for the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// It names this address.
    Names(NodeAddress),
    /// It answers, but knows no primary by that name.
    Unknown,
    /// It did not answer: why.
    Silent(String),
}

/// Every configured sentinel with its answer, in the order of the list.
pub struct Poll {
    answers: Vec<(NodeAddress, Answer)>,
}

impl Poll {
    /// The answers of the configured sentinels, one each.
    pub fn new(answers: Vec<(NodeAddress, Answer)>) -> Self {
        Self { answers }
    }

    /// The address a strict majority of the configured sentinels name, if one is: at
    /// most one can be, so there is nothing to break a tie with.
    pub fn majority(&self) -> Option<&NodeAddress> {
        let configured = self.answers.len();
        self.named().find(|a| 2 * self.votes(a) > configured)
    }

    /// Whether no sentinel answered.
    pub fn none_answers(&self) -> bool {
        self.answers
            .iter()
            .all(|(_, a)| matches!(a, Answer::Silent(_)))
    }

    /// Whether no sentinel named any address.
    pub fn none_names(&self) -> bool {
        self.named().next().is_none()
    }

    /// Each silent sentinel and why: `host:port: error`, joined by `; `.
    pub fn silent(&self) -> String {
        let each = self
            .answers
            .iter()
            .filter_map(|(sentinel, answer)| match answer {
                Answer::Silent(why) => Some(format!("{sentinel}: {why}")),
                _ => None,
            });
        each.collect::<Vec<_>>().join("; ")
    }

    fn named(&self) -> impl Iterator<Item = &NodeAddress> {
        self.answers.iter().filter_map(|(_, a)| match a {
            Answer::Names(address) => Some(address),
            _ => None,
        })
    }

    fn votes(&self, address: &NodeAddress) -> usize {
        self.named().filter(|a| *a == address).count()
    }
}

/// How the sentinels split: each one's answer, addresses only (`127.0.0.1:26379 names
/// 127.0.0.1:6379, 127.0.0.1:26380 does not answer`).
impl fmt::Display for Poll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, (sentinel, answer)) in self.answers.iter().enumerate() {
            let sep = if n == 0 { "" } else { ", " };
            match answer {
                Answer::Names(address) => write!(f, "{sep}{sentinel} names {address}")?,
                Answer::Unknown => write!(f, "{sep}{sentinel} knows no such primary")?,
                Answer::Silent(_) => write!(f, "{sep}{sentinel} does not answer")?,
            }
        }
        Ok(())
    }
}

/// Whether the sentinels agreed when last asked. Before they first agreed there is
/// nothing to tell: an instance does not start until they do, and its error names how
/// they split.
pub struct Agreement(AtomicU8);

/// A change that an asking of the sentinels made to their agreement.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    /// They agreed, and no longer do.
    Split,
    /// They were split, and agree again.
    Agreed,
}

impl Agreement {
    const NOT_YET: u8 = 0;
    const AGREE: u8 = 1;
    const SPLIT: u8 = 2;

    pub fn new() -> Self {
        Self(AtomicU8::new(Self::NOT_YET))
    }

    /// Notes whether they agree now; what changed.
    pub fn note(&self, agree: bool) -> Option<Turn> {
        if !agree && self.0.load(Ordering::Relaxed) == Self::NOT_YET {
            return None;
        }
        let now = if agree { Self::AGREE } else { Self::SPLIT };
        match (self.0.swap(now, Ordering::Relaxed), now) {
            (Self::AGREE, Self::SPLIT) => Some(Turn::Split),
            (Self::SPLIT, Self::AGREE) => Some(Turn::Agreed),
            _ => None,
        }
    }

    /// Whether they were split when last asked.
    pub fn split(&self) -> bool {
        self.0.load(Ordering::Relaxed) == Self::SPLIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(port: u16) -> NodeAddress {
        NodeAddress {
            host: "10.0.0.1".into(),
            port,
        }
    }

    /// A poll of one sentinel per answer: `Some(port)` names `10.0.0.1:port`, `None`
    /// does not answer.
    fn poll(answers: &[Option<u16>]) -> Poll {
        let each = answers.iter().zip(26379..).map(|(answer, sentinel)| {
            let said = match answer {
                Some(port) => Answer::Names(address(*port)),
                None => Answer::Silent("refused".into()),
            };
            (address(sentinel), said)
        });
        Poll::new(each.collect())
    }

    fn majority(answers: &[Option<u16>]) -> Option<u16> {
        poll(answers).majority().map(|a| a.port)
    }

    #[test]
    fn two_of_three_name_the_primary_wherever_the_third_is_listed() {
        assert_eq!(majority(&[Some(6379), Some(6379), Some(7000)]), Some(6379));
        assert_eq!(majority(&[Some(7000), Some(6379), Some(6379)]), Some(6379));
        assert_eq!(majority(&[Some(6379), Some(7000), Some(6379)]), Some(6379));
        assert_eq!(majority(&[Some(6379), Some(6379), None]), Some(6379));
        assert_eq!(majority(&[Some(6379); 3]), Some(6379));
    }

    #[test]
    fn without_a_strict_majority_of_those_configured_none_is_named() {
        assert_eq!(majority(&[Some(6379), Some(7000), Some(7001)]), None);
        assert_eq!(
            majority(&[Some(6379), Some(7000), None]),
            None,
            "2 of 3 answer"
        );
        let two_of_five = [Some(6379), Some(6379), None, None, None];
        assert_eq!(majority(&two_of_five), None);
        assert_eq!(majority(&[Some(6379), Some(7000)]), None, "a tie");
        let tie = [Some(6379), Some(6379), Some(7000), Some(7000)];
        assert_eq!(majority(&tie), None);
        assert_eq!(majority(&[Some(7000), Some(7000), Some(6379), None]), None);
        assert_eq!(majority(&[None, None, None]), None);
        assert_eq!(majority(&[]), None);
    }

    #[test]
    fn three_of_five_and_one_of_one_are_majorities() {
        let three_of_five = [Some(7000), Some(6379), Some(6379), None, Some(6379)];
        assert_eq!(majority(&three_of_five), Some(6379));
        assert_eq!(majority(&[Some(6379)]), Some(6379));
    }

    #[test]
    fn a_split_is_told_as_it_begins_and_as_it_ends_once_they_first_agreed() {
        let agreement = Agreement::new();
        assert_eq!(agreement.note(false), None, "at start the error tells it");
        assert!(!agreement.split());
        assert_eq!(agreement.note(true), None, "agreed first, not again");
        assert_eq!(agreement.note(true), None);
        assert_eq!(agreement.note(false), Some(Turn::Split));
        assert!(agreement.split());
        assert_eq!(agreement.note(false), None, "once, not at every asking");
        assert_eq!(agreement.note(true), Some(Turn::Agreed));
        assert!(!agreement.split());
    }

    #[test]
    fn a_split_names_each_sentinel_and_what_it_said() {
        let mut answers = poll(&[Some(6379), Some(7000), None]).answers;
        answers.push((address(26382), Answer::Unknown));
        let poll = Poll::new(answers);
        assert_eq!(
            poll.to_string(),
            "10.0.0.1:26379 names 10.0.0.1:6379, 10.0.0.1:26380 names 10.0.0.1:7000, \
             10.0.0.1:26381 does not answer, 10.0.0.1:26382 knows no such primary"
        );
        assert_eq!(poll.silent(), "10.0.0.1:26381: refused");
        assert!(!poll.none_answers() && !poll.none_names());
        assert!(self::poll(&[None, None]).none_answers());
    }
}
