//! Shrinking a failure to a minimal replay: chunks of the steps before the
//! failing check are dropped while a replay on a fresh server still fails
//! (bounded in replays and time), and the result is printed as redis-cli
//! lines with the server, mode and configs.

use crate::common::Server;
use crate::step::{replay, Step};
use crate::target::{Mode, Target};
use crate::{caps, run_step, Totals};
use std::time::{Duration, Instant};

const BUDGET: Duration = Duration::from_secs(120);
const MAX_REPLAYS: usize = 80;

/// Replays `steps` on a fresh target: the failure's message, if it fails.
fn replay_fails(mode: Mode, steps: &[Step]) -> Option<String> {
    let mut t = Target::start(mode);
    let caps = caps(mode, &t);
    let mut totals = Totals::default();
    for s in steps {
        if let Err(e) = run_step(&mut t, caps, s, &mut totals) {
            return Some(e);
        }
    }
    None
}

/// The smallest failing prefix-with-holes found of `log` (its last step is
/// the failing check), and its failure. A 3-node cluster's log is kept
/// whole: its resharding steps name the nodes that owned a slot then.
pub fn shrink(mode: Mode, log: Vec<Step>, err: String) -> (Vec<Step>, String) {
    if mode == Mode::ClusterThree || log.len() < 2 {
        return (log, err);
    }
    let start = Instant::now();
    let mut replays = 0;
    let (mut body, last) = (log[..log.len() - 1].to_vec(), log[log.len() - 1].clone());
    let mut err = err;
    let mut chunk = body.len().div_ceil(2).max(1);
    let with = |b: &[Step]| -> Vec<Step> {
        let mut v = b.to_vec();
        v.push(last.clone());
        v
    };
    // First: does it replay at all?
    match replay_fails(mode, &with(&body)) {
        Some(e) => err = e,
        None => {
            eprintln!("shrink: the failure did not replay (timing); the whole run is printed");
            return (log, err);
        }
    }
    while chunk >= 1 && start.elapsed() < BUDGET && replays < MAX_REPLAYS {
        let mut i = 0;
        let mut removed = false;
        while i < body.len() && start.elapsed() < BUDGET && replays < MAX_REPLAYS {
            let end = (i + chunk).min(body.len());
            let mut cand = body[..i].to_vec();
            cand.extend_from_slice(&body[end..]);
            replays += 1;
            if let Some(e) = replay_fails(mode, &with(&cand)) {
                body = cand;
                err = e;
                removed = true;
            } else {
                i = end;
            }
        }
        if !removed {
            if chunk == 1 {
                break;
            }
            chunk /= 2;
        }
    }
    eprintln!(
        "shrink: {} -> {} steps in {replays} replays, {} s",
        log.len(),
        body.len() + 1,
        start.elapsed().as_secs()
    );
    (with(&body), err)
}

/// The failure as a reader needs it: where, how, and the replay.
pub fn report(mode: Mode, seed: u64, steps: &[Step], err: &str) -> String {
    let configs: Vec<String> = mode
        .configs()
        .iter()
        .map(|(k, v)| format!("--{k} {v}"))
        .collect();
    format!(
        "fuzz failure: server {} ({}), mode {}, seed {seed}\n\
         server options: --loadmodule libsnapscan.so {}{}\n\
         failure: {err}\n\
         replay ({} steps, redis-cli lines; '#' lines are checks and topology changes):\n{}",
        Server::server_name(),
        crate::common::server_binary().display(),
        mode.name(),
        configs.join(" "),
        match mode {
            Mode::ClusterOne => " (then CLUSTER ADDSLOTSRANGE 0 16383)",
            Mode::ClusterThree => " (3 primaries, slots split evenly)",
            Mode::Replica => " (and a replica of it)",
            Mode::Native => " (then CONFIG SET snapshot.serve-native all)",
            Mode::Standalone => "",
        },
        steps.len(),
        replay(steps)
    )
}
