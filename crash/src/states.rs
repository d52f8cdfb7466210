//! Crash states from a write log, as dm-log-writes replays and CrashMonkey
//! choose them: every prefix ending at a flush; every write boundary when
//! the log is short; and seeded random subsets of the writes in flight
//! after a flush (the disk kept some of them and lost the others).

use jbdfs::device::Event;

use jbdfs::util::rng::Rng;

/// How many states to make.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Choice {
    /// Every write boundary when the log has at most this many writes.
    pub boundary_limit: usize,
    /// Random subsets of in-flight writes.
    pub random: usize,
    pub seed: u64,
    /// Damage done to each state before it is checked.
    pub damage: crate::check::Damage,
}

/// One crash state: the first `prefix` events applied, then the writes at
/// the indices in `extra` (all after `prefix`, before the next flush).
#[derive(Clone, Debug)]
pub(crate) struct CrashState {
    pub kind: &'static str,
    pub prefix: usize,
    pub extra: Vec<usize>,
}

/// Where the flushes and operation marks are.
pub(crate) struct Layout {
    pub flushes: Vec<usize>,
    /// (log index, K) for each mark "op K".
    pub ops: Vec<(usize, usize)>,
    pub writes: Vec<usize>,
    pub len: usize,
}

impl Layout {
    pub(crate) fn new(events: &[Event]) -> Layout {
        let mut l = Layout {
            flushes: Vec::new(),
            ops: Vec::new(),
            writes: Vec::new(),
            len: events.len(),
        };
        for (i, e) in events.iter().enumerate() {
            match e {
                Event::Flush => l.flushes.push(i),
                Event::Write { .. } => l.writes.push(i),
                Event::Mark(m) => {
                    if let Some(k) = m.strip_prefix("op ").and_then(|k| k.parse().ok()) {
                        l.ops.push((i, k));
                    }
                }
            }
        }
        l
    }

    /// The first flush at or after index `i`, or the log's end.
    pub(crate) fn next_flush(&self, i: usize) -> usize {
        let at = self.flushes.partition_point(|&f| f < i);
        self.flushes.get(at).copied().unwrap_or(self.len)
    }

    /// Operations whose mark comes before index `i`.
    pub(crate) fn ops_before(&self, i: usize) -> usize {
        let at = self.ops.partition_point(|&(pos, _)| pos < i);
        at.checked_sub(1).map_or(0, |j| self.ops[j].1)
    }
}

/// The states to test, in a fixed order: an index names one for re-runs.
pub(crate) fn enumerate(layout: &Layout, choice: Choice) -> Vec<CrashState> {
    let mut out = vec![CrashState {
        kind: "start",
        prefix: 0,
        extra: Vec::new(),
    }];
    for &f in &layout.flushes {
        out.push(CrashState {
            kind: "flush",
            prefix: f + 1,
            extra: Vec::new(),
        });
    }
    if layout.writes.len() <= choice.boundary_limit {
        for &w in &layout.writes {
            out.push(CrashState {
                kind: "write",
                prefix: w + 1,
                extra: Vec::new(),
            });
        }
    }
    out.push(CrashState {
        kind: "end",
        prefix: layout.len,
        extra: Vec::new(),
    });
    random_subsets(layout, choice, &mut out);
    out
}

/// Half the subsets from the writes after the last flush, the rest from
/// in-flight writes after random flushes.
fn random_subsets(layout: &Layout, choice: Choice, out: &mut Vec<CrashState>) {
    let mut rng = Rng::new(choice.seed);
    let starts: Vec<usize> = std::iter::once(0)
        .chain(layout.flushes.iter().map(|f| f + 1))
        .collect();
    let in_flight = |start: usize| -> Vec<usize> {
        let end = layout.next_flush(start);
        let a = layout.writes.partition_point(|&w| w < start);
        let b = layout.writes.partition_point(|&w| w < end);
        layout.writes[a..b].to_vec()
    };
    let busy: Vec<usize> = starts
        .iter()
        .copied()
        .filter(|&s| in_flight(s).len() >= 2)
        .collect();
    let last = *starts.last().unwrap_or(&0);
    for i in 0..choice.random {
        let start = if i % 2 == 0 && in_flight(last).len() >= 2 {
            last
        } else if let Some(&s) = rng.pick(&busy) {
            s
        } else {
            return;
        };
        let extra: Vec<usize> = in_flight(start)
            .into_iter()
            .filter(|_| rng.chance(50))
            .collect();
        out.push(CrashState {
            kind: "subset",
            prefix: start,
            extra,
        });
    }
}

/// Which operations' results the state may show: at least everything up
/// to the last sync that returned before the disk could have lost the
/// state's writes (its mark is before the next flush: the sync's own flush
/// came earlier), at most the operation in progress at the last write kept.
pub(crate) fn op_bounds(layout: &Layout, state: &CrashState, syncs: &[bool]) -> (usize, usize) {
    let last = state.extra.last().map_or(state.prefix, |&w| w + 1);
    let horizon = layout.next_flush(last.max(state.prefix));
    let done = layout.ops_before(horizon);
    let lo = (1..=done)
        .rev()
        .find(|&k| syncs.get(k - 1) == Some(&true))
        .unwrap_or(0);
    let n = syncs.len();
    let hi = (layout.ops_before(last) + 1).min(n).max(lo);
    (lo, hi)
}

/// Applies `state` over the image as it stood with `from` events applied
/// (`img`), which must not be past the state's prefix.
pub(crate) fn advance(img: &mut [u8], events: &[Event], from: usize, to: usize) {
    for e in &events[from..to] {
        apply(img, e);
    }
}

pub(crate) fn apply(img: &mut [u8], e: &Event) {
    if let Event::Write { offset, data } = e {
        let o = *offset as usize;
        img[o..o + data.len()].copy_from_slice(data);
    }
}
