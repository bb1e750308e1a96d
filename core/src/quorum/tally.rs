//! How a round's answers add up: the quorum sizes, the tally of what the
//! nodes said, and when more answers can no longer change the outcome.

use crate::error::Error;

/// Write quorum: a strict majority.
pub(crate) fn write_quorum(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Read quorum: ⌈n/2⌉, the fewest that still intersect every write quorum.
pub(crate) fn read_quorum(nodes: usize) -> usize {
    nodes.div_ceil(2)
}

/// What one node said.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Not part of this round (a release goes only to nodes that granted).
    NotAsked,
    Pending,
    /// Granted (or done); a write grant's fencing value, else 0.
    Yes(u64),
    /// Denied (or already gone).
    No,
    /// Denied by a node guarding against a restart (counts as a "no").
    Recovering,
    /// Denied: the name's holders listed other nodes (their fingerprint).
    OtherNodes(String),
    /// Could not ask: connection, timeout, protocol.
    Failed(Error),
}

/// How the answers stand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) yes: usize,
    pub(crate) no: usize,
    pub(crate) failed: usize,
    pub(crate) pending: usize,
    /// Of the `no` answers, those from nodes guarding against a restart.
    pub(crate) recovering: usize,
}

impl Tally {
    /// Nodes that answered, yes or no.
    pub(crate) fn answered(&self) -> usize {
        self.yes + self.no
    }

    /// Whether a caller waiting for `quorum` yes answers can stop because
    /// no pending answer can change the outcome: quorum reached, nothing
    /// pending, or quorum ruled out by a quorum of nodes that answered (so
    /// "denied", never "too few reachable"). With an even node count n/2
    /// denials rule a write quorum out while only n/2 nodes have answered:
    /// stopping there would read a busy lock as nodes that are down.
    pub(crate) fn decides(&self, quorum: usize) -> bool {
        self.yes >= quorum
            || self.pending == 0
            || (self.yes + self.pending < quorum && self.answered() >= quorum)
    }
}

/// How `answers` stand.
pub(crate) fn tally(answers: &[Answer]) -> Tally {
    let mut tally = Tally::default();
    for answer in answers {
        match answer {
            Answer::NotAsked => {}
            Answer::Pending => tally.pending += 1,
            Answer::Yes(_) => tally.yes += 1,
            Answer::No | Answer::OtherNodes(_) => tally.no += 1,
            Answer::Recovering => {
                tally.no += 1;
                tally.recovering += 1;
            }
            Answer::Failed(_) => tally.failed += 1,
        }
    }
    tally
}

/// The nodes that granted, with their values.
pub(crate) fn granted(answers: &[Answer]) -> Vec<(usize, u64)> {
    answers
        .iter()
        .enumerate()
        .filter_map(|(index, answer)| match answer {
            Answer::Yes(value) => Some((index, *value)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_quorum_and_a_write_quorum_always_share_a_node() {
        for n in 1..=32 {
            assert!(read_quorum(n) + write_quorum(n) > n, "n={n}");
            assert!(2 * write_quorum(n) > n, "n={n}");
            assert!(read_quorum(n) <= write_quorum(n), "n={n}");
        }
        assert_eq!((write_quorum(5), read_quorum(5)), (3, 3));
        assert_eq!((write_quorum(4), read_quorum(4)), (3, 2));
        assert_eq!((write_quorum(1), read_quorum(1)), (1, 1));
    }

    #[test]
    fn a_round_ends_only_when_more_answers_cannot_change_its_outcome() {
        for n in 1..=32 {
            for quorum in [write_quorum(n), read_quorum(n)] {
                let granted = Tally {
                    yes: quorum,
                    pending: n - quorum,
                    ..Tally::default()
                };
                assert!(granted.decides(quorum), "n={n} q={quorum}");
                // The fewest denials that rule a quorum out: with 2 nodes
                // a single "no" for a write, fewer answers than a quorum.
                let no = n - quorum + 1;
                let ruled_out = Tally {
                    no,
                    pending: n - no,
                    ..Tally::default()
                };
                assert_eq!(ruled_out.decides(quorum), no >= quorum, "n={n} q={quorum}");
                let all_in = Tally {
                    no,
                    failed: n - no,
                    ..Tally::default()
                };
                assert!(all_in.decides(quorum), "n={n} q={quorum}");
            }
        }
        // Failures with answers pending: whether the nodes are reachable
        // is still open, so the round waits.
        let open = Tally {
            no: 1,
            failed: 1,
            pending: 2,
            ..Tally::default()
        };
        assert!(!open.decides(write_quorum(4)));
    }
}
