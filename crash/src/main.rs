//! jbdfs-crash: the crash campaign. `run` records workloads in-process (a
//! recording device over a memory image, in each data mode), builds crash
//! states from each log, and checks every state: journal replay,
//! fsck-jbdfs -fn, e2fsck -fn, and the tree against the model. `check`
//! re-runs the states of one saved log, or one state, for a reproducer.

mod check;
mod exec;
mod model;
mod states;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, Context};
use clap::{Parser, Subcommand};
use jbdfs::device::record::{base_image_path, read_log};

use check::Damage;
use exec::Mode;
use states::{Choice, Layout};

#[derive(Parser)]
#[command(name = "jbdfs-crash", version, about = "Crash-state testing for jbdfs")]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Record workloads and check their crash states.
    Run {
        /// The CI-sized campaign (a few minutes on two cores).
        #[arg(long)]
        quick: bool,
        /// Only these workloads (repeatable).
        #[arg(long = "workload")]
        workloads: Vec<String>,
        /// Only these data modes (repeatable).
        #[arg(long = "mode")]
        modes: Vec<String>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where logs and scratch images go.
        #[arg(long, default_value = "/tmp/jbdfs-crash")]
        dir: PathBuf,
        /// Worker threads checking states.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Damage each crash state before checking it (see `check --help`).
        #[arg(long, value_enum, default_value_t = Damage::None)]
        damage: Damage,
    },
    /// Check the crash states of a saved log (with LOG.base beside it).
    Check {
        log: PathBuf,
        /// Only this state.
        #[arg(long)]
        state: Option<usize>,
        #[command(flatten)]
        choice: ChoiceArgs,
    },
    /// Print a log's operations (rebuilt from its description) and events.
    Show { log: PathBuf },
}

#[derive(clap::Args, Clone, Copy)]
struct ChoiceArgs {
    /// Test every write boundary when the log has at most this many writes.
    #[arg(long, default_value_t = 400)]
    boundaries: usize,
    /// Random subsets of in-flight writes.
    #[arg(long, default_value_t = 24)]
    random: usize,
    /// Seed of the random subsets.
    #[arg(long = "subset-seed", default_value_t = 1)]
    subset_seed: u64,
    /// Damage each crash state before checking it: `journal-inode` zeroes
    /// the journal inode, so that only fsck's use of the superblock's
    /// backup of its block map (s_jnl_blocks) can find the log.
    #[arg(long, value_enum, default_value_t = Damage::None)]
    damage: Damage,
}

impl ChoiceArgs {
    fn choice(self) -> Choice {
        Choice {
            boundary_limit: self.boundaries,
            random: self.random,
            seed: self.subset_seed,
            damage: self.damage,
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let res = match args.command {
        Cmd::Run {
            quick,
            workloads,
            modes,
            seed,
            dir,
            jobs,
            damage,
        } => campaign(quick, &workloads, &modes, (seed, damage), &dir, jobs),
        Cmd::Check { log, state, choice } => {
            lock_log(&log).and_then(|_lock| check_log(&log, state, choice.choice(), 2))
        }
        Cmd::Show { log } => lock_log(&log).and_then(|_lock| show(&log)),
    };
    match res {
        Ok(t) => {
            println!("crash states: {} tested, {} failed", t.tested, t.failed);
            if t.failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("jbdfs-crash: {e:#}");
            println!("crash states: 0 tested, 1 failed");
            ExitCode::from(2)
        }
    }
}

#[derive(Default, Clone)]
struct Tally {
    tested: usize,
    failed: usize,
    /// Failed states by what failed first (e2fsck, lost-data, ...).
    classes: BTreeMap<&'static str, usize>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.tested += other.tested;
        self.failed += other.failed;
        for (c, n) in &other.classes {
            *self.classes.entry(c).or_default() += n;
        }
    }
}

/// Sizes of each workload, and how many runs (seeds) of it.
fn plan(workload: &str, quick: bool) -> (usize, usize) {
    match (workload, quick) {
        ("ace", true) => (0, 24),
        ("ace", false) => (0, 300),
        ("fsx", true) => (60, 1),
        ("fsx", false) => (300, 4),
        ("punch", true) => (40, 1),
        ("punch", false) => (150, 4),
        ("dirtree", true) => (20, 1),
        ("dirtree", false) => (60, 3),
        (_, true) => (30, 1),
        (_, false) => (120, 4),
    }
}

fn campaign(
    quick: bool,
    workloads: &[String],
    modes: &[String],
    (seed, damage): (u64, Damage),
    dir: &Path,
    jobs: usize,
) -> anyhow::Result<Tally> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let workloads: Vec<String> = if workloads.is_empty() {
        workload::WORKLOADS.iter().map(|s| s.to_string()).collect()
    } else {
        workloads.to_vec()
    };
    let modes: Vec<Mode> = if modes.is_empty() {
        exec::MODES.to_vec()
    } else {
        modes
            .iter()
            .map(|m| exec::parse_mode(m))
            .collect::<anyhow::Result<_>>()?
    };
    let choice = Choice {
        boundary_limit: if quick { 150 } else { 2000 },
        random: if quick { 8 } else { 64 },
        seed,
        damage,
    };
    let mut total = Tally::default();
    let mut table: BTreeMap<(String, &str), Tally> = BTreeMap::new();
    for w in &workloads {
        let (size, runs) = plan(w, quick);
        for mode in &modes {
            let mut t = Tally::default();
            for run in 0..runs as u64 {
                let s = seed.wrapping_mul(1000).wrapping_add(run);
                let desc = format!("workload={w} mode={} seed={s} size={size}", mode.name());
                let log = dir.join(format!("{w}-{}-{s}.log", mode.name()));
                let ops = workload::generate(w, s, size)?;
                exec::record(&ops, *mode, &log, &desc)
                    .with_context(|| format!("recording {desc}"))?;
                let r = check_log(&log, None, choice, jobs)?;
                t.add(&r);
                if r.failed == 0 {
                    let _ = std::fs::remove_file(base_image_path(&log));
                    let _ = std::fs::remove_file(&log);
                }
            }
            eprintln!(
                "{w:>16} {:>9}: {:>6} states, {} failed",
                mode.name(),
                t.tested,
                t.failed
            );
            total.add(&t);
            table.insert((w.clone(), mode.name()), t);
        }
    }
    eprintln!("\nstates tested / failed (failures by first failing check)");
    eprintln!("| workload | ordered | writeback | journal |\n|---|---|---|---|");
    for w in &workloads {
        let cell = |m: &str| {
            table.get(&(w.clone(), m)).map_or("-".to_string(), |t| {
                let classes: Vec<String> =
                    t.classes.iter().map(|(c, n)| format!("{c} {n}")).collect();
                if classes.is_empty() {
                    format!("{} / 0", t.tested)
                } else {
                    format!("{} / {} ({})", t.tested, t.failed, classes.join(", "))
                }
            })
        };
        eprintln!(
            "| {w} | {} | {} | {} |",
            cell("ordered"),
            cell("writeback"),
            cell("journal")
        );
    }
    Ok(total)
}

/// A read lock on a saved log, held while it is read: a daemon recording
/// it (`-o record=`) holds a write lock, and its log has no end yet.
fn lock_log(log: &Path) -> anyhow::Result<std::fs::File> {
    use jbdfs::device::lock::{self, InUse, LockKind};
    let file = std::fs::File::open(log).with_context(|| log.display().to_string())?;
    if !lock::try_lock(&file, LockKind::Read)? {
        let busy = InUse {
            path: log.to_path_buf(),
            holder: lock::find_holder(log, &file),
        };
        anyhow::bail!("{busy}: it is still being recorded");
    }
    Ok(file)
}

/// Prints the operations and the log, marks and flushes in order.
fn show(log: &Path) -> anyhow::Result<Tally> {
    let rec = read_log(log).with_context(|| log.display().to_string())?;
    let (w, _, seed, size) = describe(&rec.description)?;
    println!("{}", rec.description);
    for (i, op) in workload::generate(&w, seed, size)?.iter().enumerate() {
        println!("op {}: {op:?}", i + 1);
    }
    for (i, e) in rec.events.iter().enumerate() {
        match e {
            jbdfs::device::Event::Write { offset, data } => {
                println!(
                    "{i}: write {} bytes at block {} (1 KiB)",
                    data.len(),
                    offset / 1024
                )
            }
            jbdfs::device::Event::Flush => println!("{i}: flush"),
            jbdfs::device::Event::Mark(m) => println!("{i}: mark {m}"),
        }
    }
    Ok(Tally::default())
}

/// The workload, mode, seed and size a log's description names.
fn describe(desc: &str) -> anyhow::Result<(String, Mode, u64, usize)> {
    let fields: BTreeMap<&str, &str> = desc.split(' ').filter_map(|f| f.split_once('=')).collect();
    let get = |k: &str| {
        fields
            .get(k)
            .copied()
            .ok_or_else(|| anyhow!("the log's description {desc:?} has no {k}="))
    };
    Ok((
        get("workload")?.to_string(),
        exec::parse_mode(get("mode")?)?,
        get("seed")?.parse()?,
        get("size")?.parse()?,
    ))
}

/// Checks the states of one log; prints a reproducer for each failure.
fn check_log(
    log: &Path,
    only: Option<usize>,
    choice: Choice,
    jobs: usize,
) -> anyhow::Result<Tally> {
    let rec = read_log(log).with_context(|| log.display().to_string())?;
    let (w, mode, seed, size) = describe(&rec.description)?;
    let ops = workload::generate(&w, seed, size)?;
    let base = std::fs::read(base_image_path(log))
        .with_context(|| base_image_path(log).display().to_string())?;
    anyhow::ensure!(
        base.len() as u64 == rec.device_size,
        "the base image's size differs from the log's"
    );
    let layout = Layout::new(&rec.events);
    let run = LogRun {
        log,
        states: states::enumerate(&layout, choice),
        layout,
        exp: check::Expected::build(&ops)?,
        rec,
        base,
        mode,
        choice,
        classes: Default::default(),
    };
    let chosen: Vec<usize> = match only {
        Some(i) if i < run.states.len() => vec![i],
        Some(i) => anyhow::bail!("state {i}: the log has {} states", run.states.len()),
        None => (0..run.states.len()).collect(),
    };
    let jobs = jobs.clamp(1, 16);
    std::thread::scope(|s| {
        for j in 0..jobs {
            let mine: Vec<usize> = chosen.iter().copied().skip(j).step_by(jobs).collect();
            let run = &run;
            s.spawn(move || run.check_states(mine, j));
        }
    });
    let classes = run.classes.into_inner().unwrap_or_default();
    Ok(Tally {
        tested: chosen.len(),
        failed: classes.values().sum(),
        classes,
    })
}

/// Where e2fsck's copy of each state goes: memory when there is a tmpfs.
fn scratch_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// One log's states under test, shared by the worker threads.
struct LogRun<'a> {
    log: &'a Path,
    rec: jbdfs::device::record::RecordedLog,
    base: Vec<u8>,
    exp: check::Expected,
    layout: Layout,
    states: Vec<states::CrashState>,
    mode: Mode,
    choice: Choice,
    classes: std::sync::Mutex<BTreeMap<&'static str, usize>>,
}

impl LogRun<'_> {
    /// Checks states `mine` in prefix order, building each image from the
    /// last one rather than from the start.
    fn check_states(&self, mut mine: Vec<usize>, worker: usize) {
        let scratch =
            scratch_dir().join(format!("crash-state-{}-{worker}.img", std::process::id()));
        let mut img = self.base.clone();
        let mut at = 0;
        mine.sort_by_key(|&i| self.states[i].prefix);
        for i in mine {
            let st = &self.states[i];
            states::advance(&mut img, &self.rec.events, at, st.prefix);
            at = st.prefix;
            let mut state_img = img.clone();
            for &x in &st.extra {
                states::apply(&mut state_img, &self.rec.events[x]);
            }
            let bounds = states::op_bounds(&self.layout, st, &self.exp.syncs);
            if let Err(f) = check::check_state(
                state_img,
                &self.exp,
                bounds,
                (self.mode, self.choice.damage),
                &scratch,
            ) {
                self.report(i, bounds, &f);
            }
        }
        let _ = std::fs::remove_file(&scratch);
    }

    fn report(&self, i: usize, (lo, hi): (usize, usize), f: &check::Failure) {
        if let Ok(mut c) = self.classes.lock() {
            *c.entry(f.class).or_default() += 1;
        }
        let st = &self.states[i];
        let c = self.choice;
        println!(
            "FAILED [{}] {} state {i} ({} at event {} + {} in-flight writes, operations {lo}..={hi}): {}\n  reproduce: jbdfs-crash check {} --state {i} --boundaries {} --random {} --subset-seed {} --damage {}",
            f.class, self.rec.description, st.kind, st.prefix, st.extra.len(), f.detail,
            self.log.display(), c.boundary_limit, c.random, c.seed, c.damage.name()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(workload: &str, mode: Mode, size: usize) -> (PathBuf, Vec<model::Op>) {
        let log = std::env::temp_dir().join(format!(
            "jbdfs-crash-test-{}-{workload}-{}.log",
            std::process::id(),
            mode.name()
        ));
        let ops = workload::generate(workload, 7, size).unwrap();
        let desc = format!(
            "workload={workload} mode={} seed=7 size={size}",
            mode.name()
        );
        exec::record(&ops, mode, &log, &desc).unwrap();
        (log, ops)
    }

    fn cleanup(log: &Path) {
        let _ = std::fs::remove_file(base_image_path(log));
        let _ = std::fs::remove_file(log);
    }

    #[test]
    fn every_state_of_a_small_workload_passes() {
        let (log, _) = recorded("rename_link", Mode::Ordered, 8);
        let choice = Choice {
            boundary_limit: 1000,
            random: 8,
            seed: 1,
            damage: Damage::None,
        };
        let t = check_log(&log, None, choice, 1).unwrap();
        assert!(t.tested > 10);
        assert_eq!(t.failed, 0);
        let damaged = Choice {
            damage: Damage::JournalInode,
            ..choice
        };
        let t = check_log(&log, None, damaged, 1).unwrap();
        assert_eq!(t.failed, 0, "a zeroed journal inode lost fsync'd work");
        cleanup(&log);
    }

    /// The checker is not vacuous: the untouched starting image, claimed
    /// to hold every operation's result, must fail.
    #[test]
    fn a_state_missing_synced_work_fails() {
        let (log, ops) = recorded("fs_mark", Mode::Journal, 4);
        let exp = check::Expected::build(&ops).unwrap();
        let base = std::fs::read(base_image_path(&log)).unwrap();
        let scratch = log.with_extension("img");
        let n = ops.len();
        let f = check::check_state(
            base.clone(),
            &exp,
            (n, n),
            (Mode::Journal, Damage::None),
            &scratch,
        )
        .expect_err("the empty image cannot hold synced files");
        assert_eq!(f.class, "metadata", "{}", f.detail);
        check::check_state(base, &exp, (0, n), (Mode::Journal, Damage::None), &scratch).unwrap();
        let _ = std::fs::remove_file(&scratch);
        cleanup(&log);
    }

    #[test]
    fn the_model_rebuilds_from_the_description() {
        let (w, mode, seed, size) = describe("workload=fsx mode=writeback seed=3 size=9").unwrap();
        assert_eq!(
            (w.as_str(), mode, seed, size),
            ("fsx", Mode::Writeback, 3, 9)
        );
        assert!(describe("workload=fsx").is_err());
        let a = format!("{:?}", workload::generate("ace", 5, 0).unwrap());
        assert_eq!(a, format!("{:?}", workload::generate("ace", 5, 0).unwrap()));
    }
}
