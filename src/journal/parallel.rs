//! Device writes of many blocks at once (a commit's log blocks, a
//! checkpoint's home blocks), split over two threads when there are enough
//! of them. The blocks are distinct and written by position, so the two
//! halves need no order between them; each write is a copy the kernel makes
//! on the calling CPU, and in data=journal the commit thread writes every
//! block twice, so on its own it would be the bottleneck.

use std::io;

use crate::device::BlockDevice;

/// Blocks at consecutive device offsets from `at` (bytes), one device write.
pub(super) struct Run<'a> {
    pub at: u64,
    pub blocks: Vec<&'a [u8]>,
}

impl Run<'_> {
    fn bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.len()).sum()
    }
}

/// Below this, a second thread costs more than it saves.
const SPLIT_BYTES: usize = 2 << 20;

/// Writes every run; the second half (by bytes) on a helper thread when
/// there is enough to write and the thread can be had.
pub(super) fn write_runs(dev: &dyn BlockDevice, runs: Vec<Run<'_>>) -> io::Result<()> {
    let total: usize = runs.iter().map(Run::bytes).sum();
    if total < SPLIT_BYTES {
        return write_all(dev, &runs);
    }
    let (first, second) = halves(runs, total / 2);
    std::thread::scope(|s| {
        let helper = std::thread::Builder::new()
            .name("jbdfs-write".into())
            .spawn_scoped(s, || write_all(dev, &second));
        let Ok(helper) = helper else {
            return write_all(dev, &first).and_then(|()| write_all(dev, &second));
        };
        let mine = write_all(dev, &first);
        let theirs = helper
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("a log writer thread panicked")));
        mine.and(theirs)
    })
}

fn write_all(dev: &dyn BlockDevice, runs: &[Run<'_>]) -> io::Result<()> {
    for run in runs {
        let slices: Vec<io::IoSlice<'_>> = run.blocks.iter().map(|b| io::IoSlice::new(b)).collect();
        dev.write_vectored_at(&slices, run.at)?;
    }
    Ok(())
}

/// Splits `runs` after the first `half` bytes, cutting a run in two where
/// the boundary falls inside it.
fn halves(runs: Vec<Run<'_>>, half: usize) -> (Vec<Run<'_>>, Vec<Run<'_>>) {
    let (mut first, mut second) = (Vec::new(), Vec::new());
    let mut seen = 0;
    for mut run in runs {
        let bytes = run.bytes();
        if seen >= half {
            second.push(run);
        } else if seen + bytes <= half {
            seen += bytes;
            first.push(run);
        } else {
            let mut k = 0;
            let mut head = 0;
            while k < run.blocks.len() && seen + head < half {
                head += run.blocks[k].len();
                k += 1;
            }
            let tail = run.blocks.split_off(k);
            second.push(Run {
                at: run.at + head as u64,
                blocks: tail,
            });
            first.push(run);
            seen += head;
        }
    }
    (first, second)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    #[test]
    fn runs_split_across_threads_land_where_they_belong() {
        let bs = 4096;
        let blocks: Vec<Vec<u8>> = (0..1536u32).map(|i| vec![(i % 251) as u8; bs]).collect();
        // A long run, a gap, and a short one: the split falls inside the first.
        let runs = vec![
            Run {
                at: 0,
                blocks: blocks[..1024].iter().map(|b| &b[..]).collect(),
            },
            Run {
                at: 2048 * bs as u64,
                blocks: blocks[1024..].iter().map(|b| &b[..]).collect(),
            },
        ];
        let dev = MemoryDevice::from_vec(vec![0; 4096 * bs]);
        write_runs(&dev, runs).unwrap();
        let mut got = vec![0u8; bs];
        for (i, want) in blocks.iter().enumerate() {
            let at = if i < 1024 { i } else { 2048 + i - 1024 };
            dev.read_at(&mut got, (at * bs) as u64).unwrap();
            assert!(&got == want, "block {i}");
        }
    }
}
