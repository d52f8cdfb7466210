//! Journal statistics in the shape of Linux's /proc/fs/jbd2/<dev>/info.

use std::sync::atomic::Ordering::Relaxed;

use super::journal::Journal;

impl Journal {
    /// The statistics text, as /proc/fs/jbd2/*/info prints it, plus what
    /// its milliseconds round away on fast storage: the locked phase and
    /// the ordered-data flush in microseconds, and the time synchronous
    /// handles spent waiting to batch.
    pub fn stats(&self) -> String {
        let c = &self.counters;
        let n = c.transactions.load(Relaxed);
        let per = |v: u64| v.checked_div(n).unwrap_or(0);
        let maxlen = self.log.get().map_or(0, |l| l.maxlen);
        let avg_us = c.avg_commit_micros.load(Relaxed);
        format!(
            "{n} transactions ({n} requested), each up to {max} blocks\n\
             average: \n  \
             {wait}ms waiting for transaction\n  \
             0ms request delay\n  \
             {run}ms running transaction\n  \
             {locked}ms transaction was being locked\n  \
             {flushing}ms flushing data (in ordered mode)\n  \
             {log}ms logging transaction\n  \
             {avg_us}us average transaction commit time\n  \
             {locked_us}us locked, waiting for its handles to stop\n  \
             {start_wait_us}us handles waited to start while it was locked\n  \
             {flushing_us}us flushing data\n  \
             {floor_us}us fastest recent commit (the device's floor)\n  \
             {handles} handles per transaction\n  \
             {blocks} blocks per transaction\n  \
             {logged} logged blocks per transaction\n  \
             {batch}us waiting to batch per transaction (bdelay={policy})\n",
            max = maxlen / 4,
            wait = per(c.start_wait_micros.load(Relaxed)) / 1000,
            run = per(c.run_micros.load(Relaxed)) / 1000,
            locked = per(c.locked_micros.load(Relaxed)) / 1000,
            flushing = per(c.flushing_micros.load(Relaxed)) / 1000,
            locked_us = per(c.locked_micros.load(Relaxed)),
            start_wait_us = per(c.start_wait_micros.load(Relaxed)),
            flushing_us = per(c.flushing_micros.load(Relaxed)),
            log = per(c.commit_micros.load(Relaxed)) / 1000,
            handles = per(c.handles.load(Relaxed)),
            blocks = per(c.blocks.load(Relaxed)),
            logged = per(c.logged_blocks.load(Relaxed)),
            batch = per(c.batch_wait_micros.load(Relaxed)),
            policy = self.batching().label(),
            floor_us = c.floor_commit_micros.load(Relaxed),
        )
    }
}

impl super::Batching {
    /// The bdelay= spelling of the policy.
    pub fn label(&self) -> String {
        match self {
            super::Batching::Off => "0".into(),
            super::Batching::Yield => "yield".into(),
            super::Batching::Jiffies { n, .. } => n.to_string(),
            super::Batching::Jbd2 { .. } => "jbd2".into(),
            super::Batching::Auto { .. } => "auto".into(),
        }
    }
}
