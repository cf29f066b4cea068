//! The progress a user reads: plain lines (`[5/12] drain workers-... done (3.2s)`), a live line
//! on a terminal, or one JSON object per event (`apply -o json`).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::rollout::event::{Event, Sink, StepEnd, StepId};
use crate::rollout::execute::indent;
use crate::style::{Style, count};

/// How progress is shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProgressFormat {
    /// Lines of text: `[5/12] drain workers-... done (3.2s)`.
    #[default]
    Text,
    /// One JSON object per line and event (`start`, `waiting`, `done`, `failed`, `message`,
    /// `replanned`), for scripts and CI.
    Json,
}

/// How the user wants progress.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProgressUi {
    pub format: ProgressFormat,
    /// Stdout is a terminal: a live line shows the steps under way, redrawn every second.
    pub live: bool,
    pub style: Style,
    /// `-v`: a successful bootstrap's output too, indented under its step.
    pub verbose: bool,
}

/// In plain lines, a long step says what it waits for every 5 s when that changed, and every
/// half a minute anyway.
const PLAIN_TICK: Duration = Duration::from_secs(5);
const PLAIN_REPEAT: Duration = Duration::from_secs(30);

/// A step under way.
#[derive(Debug)]
struct Running {
    label: String,
    waits: String,
    started: Instant,
    /// What plain lines last said it waits for, and when; the next time they may say it.
    said: Option<(String, Duration)>,
    due: Duration,
}

/// The progress sink: where its lines go and how they look.
pub struct Progress {
    out: Mutex<Box<dyn Write + Send>>,
    ui: ProgressUi,
    /// The steps under way, by number.
    running: Mutex<BTreeMap<usize, Running>>,
}

impl Progress {
    pub fn new(out: Box<dyn Write + Send>, ui: ProgressUi) -> Self {
        Self { out: Mutex::new(out), ui, running: Mutex::default() }
    }

    /// Plain lines to stdout.
    pub fn stdout() -> Self {
        Self::new(Box::new(std::io::stdout()), ProgressUi::default())
    }

    /// Write text of the command's own (a plan, a summary) where progress goes, under the live
    /// line if there is one.
    pub fn print(&self, f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) {
        let mut out = self.out();
        if self.ui.live {
            let _ = write!(out, "\r\x1b[K");
        }
        let _ = f(&mut *out);
        if self.ui.live {
            let _ = write!(out, "{}", self.live_line());
        }
        let _ = out.flush();
    }

    fn out(&self) -> MutexGuard<'_, Box<dyn Write + Send>> {
        crate::locked(&self.out)
    }

    fn running(&self) -> MutexGuard<'_, BTreeMap<usize, Running>> {
        crate::locked(&self.running)
    }

    /// One line of text, or a JSON `message` event.
    fn line(&self, line: &str) {
        if self.ui.format == ProgressFormat::Json {
            self.emit(&json!({"event": "message", "message": line}));
        } else {
            self.print(|out| writeln!(out, "{line}"));
        }
    }

    fn emit(&self, event: &serde_json::Value) {
        let mut out = self.out();
        let _ = writeln!(out, "{event}");
        let _ = out.flush();
    }

    /// The steps under way, with how long they have run and what they wait for.
    fn live_line(&self) -> String {
        let parts: Vec<String> = self
            .running()
            .values()
            .map(|r| format!("{} {}s, waiting for {}", r.label, r.started.elapsed().as_secs(), r.waits))
            .collect();
        let width = terminal_size::terminal_size().map(|(w, _)| usize::from(w.0));
        self.ui.style.dim(&fit(parts.join(" | "), width))
    }

    fn redraw_live(&self) {
        let line = self.live_line();
        let mut out = self.out();
        let _ = write!(out, "\r\x1b[K{line}");
        let _ = out.flush();
    }

    fn started(&self, step: &StepId<'_>) {
        let label = label(step);
        let running = Running {
            label: label.clone(),
            waits: String::new(),
            started: Instant::now(),
            said: None,
            due: PLAIN_TICK,
        };
        self.running().insert(step.n, running);
        match self.ui.format {
            ProgressFormat::Json => self.emit(&json!({"event": "start", "step": step.n, "total": step.total,
                "pool": step.pool, "instance": step.instance, "action": step.verb})),
            ProgressFormat::Text if self.ui.live => self.redraw_live(),
            ProgressFormat::Text => self.print(|out| writeln!(out, "{label} ...")),
        }
    }

    fn waiting(&self, step: &StepId<'_>, elapsed: Duration, waits: &str) {
        let say = {
            let mut running = self.running();
            let Some(r) = running.get_mut(&step.n) else { return };
            waits.clone_into(&mut r.waits);
            if self.ui.live || elapsed < r.due {
                false
            } else {
                // The next look is at the next multiple of the tick.
                r.due = PLAIN_TICK
                    * (u32::try_from(elapsed.as_secs() / PLAIN_TICK.as_secs()).unwrap_or(u32::MAX) + 1);
                let repeat =
                    r.said.as_ref().is_none_or(|(said, at)| said != waits || elapsed >= *at + PLAIN_REPEAT);
                if repeat {
                    r.said = Some((waits.to_owned(), elapsed));
                }
                repeat
            }
        };
        if self.ui.live {
            self.redraw_live();
            return;
        }
        if !say {
            return;
        }
        let secs = elapsed.as_secs();
        match self.ui.format {
            ProgressFormat::Json => {
                self.emit(&json!({"event": "waiting", "step": step.n, "total": step.total,
                "pool": step.pool, "instance": step.instance, "action": step.verb,
                "seconds": secs, "for": waits}));
            }
            ProgressFormat::Text => {
                self.print(|out| writeln!(out, "{}: {secs}s, waiting for {waits}", label(step)));
            }
        }
    }

    fn ended(&self, step: &StepId<'_>, elapsed: Duration, end: StepEnd<'_>) {
        self.running().remove(&step.n);
        let secs = elapsed.as_secs_f64();
        if self.ui.format == ProgressFormat::Json {
            let mut value = json!({"step": step.n, "total": step.total, "pool": step.pool,
                "instance": step.instance, "action": step.verb, "seconds": secs});
            let (event, extra) = match end {
                StepEnd::Done => ("done", None),
                StepEnd::Stopped(e) => ("stopped", Some(("reason", e.to_string()))),
                StepEnd::Failed(e) => ("failed", Some(("error", e.to_string()))),
            };
            value["event"] = json!(event);
            if let Some((key, text)) = extra {
                value[key] = json!(text);
            }
            return self.emit(&value);
        }
        let label = label(step);
        self.line(&match end {
            StepEnd::Done => format!("{label} {} ({secs:.1}s)", self.ui.style.green("done")),
            StepEnd::Stopped(e) => {
                format!("{label} stopped ({secs:.1}s): {e}; the next run goes on from here")
            }
            StepEnd::Failed(e) => format!("{label} {} ({secs:.1}s): {e}", self.ui.style.red("FAILED")),
        });
    }
}

impl Sink for Progress {
    fn event(&self, event: &Event<'_>) {
        match *event {
            Event::Message(line) => self.line(line),
            Event::Started(step) => self.started(&step),
            Event::Waiting { step, elapsed, waits } => self.waiting(&step, elapsed, waits),
            Event::Ended { step, elapsed, end } => self.ended(&step, elapsed, end),
            Event::AsPlanned { left } => {
                self.line(&format!(
                    "-- looked at the world again: {} to go, as planned",
                    count(left, "step")
                ));
            }
            Event::Replanned { total, was, why, .. } if self.ui.format == ProgressFormat::Json => {
                self.emit(&json!({"event": "replanned", "total": total, "was": was, "why": why}));
            }
            Event::Replanned { total, was, left, first, why } => self.line(&format!(
                "-- looked at the world again, and the plan changed: {} in all (was {was}): {why}; {}",
                count(total, "step"),
                if left == 1 {
                    format!("the one left is numbered {first}")
                } else {
                    format!("the {left} left are numbered {first}-{total}")
                }
            )),
            // Said in a message of the lock's own, or of the wait; counted by the metrics.
            Event::Lock { .. }
            | Event::Evictions { .. }
            | Event::RetirementWaits { .. }
            | Event::Kube { .. } => {}
            Event::BootstrapOutput { instance, argv, output } => {
                if self.ui.verbose && !output.trim().is_empty() && self.ui.format == ProgressFormat::Text {
                    self.line(&format!(
                        "      {instance}: {argv:?}:\n{}",
                        indent(output.trim_end(), "        ")
                    ));
                }
            }
        }
    }
}

/// `[n/total] verb instance`, naming the pool when several run side by side.
fn label(step: &StepId<'_>) -> String {
    let StepId { n, total, pool, instance, verb, several_pools } = *step;
    if several_pools {
        format!("[{n}/{total}] {pool}: {verb} {instance}")
    } else {
        format!("[{n}/{total}] {verb} {instance}")
    }
}

/// `line` cut to fit one row of a terminal `width` columns wide, marked `…` where it was cut:
/// a longer line wraps, and the `\r` that redraws it reaches back to its last row only, leaving
/// stale rows above. Unknown width: as it is.
fn fit(line: String, width: Option<usize>) -> String {
    let Some(room) = width.and_then(|w| w.checked_sub(1)).filter(|r| *r > 1) else { return line };
    if line.chars().count() <= room {
        return line;
    }
    let mut cut: String = line.chars().take(room - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::SharedBuf;

    fn step() -> StepId<'static> {
        StepId { n: 3, total: 12, pool: "w", instance: "w-1", verb: "drain", several_pools: false }
    }

    fn sink(format: ProgressFormat) -> (Progress, std::sync::Arc<Mutex<Vec<u8>>>) {
        let buf = std::sync::Arc::new(Mutex::new(Vec::new()));
        let ui = ProgressUi { format, ..ProgressUi::default() };
        (Progress::new(Box::new(SharedBuf(buf.clone())), ui), buf)
    }

    fn text(buf: &Mutex<Vec<u8>>) -> String {
        String::from_utf8(buf.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn plain_lines_say_what_a_step_waits_for_every_5s_when_it_changed_and_every_30s_anyway() {
        let (progress, buf) = sink(ProgressFormat::Text);
        progress.event(&Event::Started(step()));
        let waits = |secs: u64, waits: &str| {
            progress.event(&Event::Waiting { step: step(), elapsed: Duration::from_secs(secs), waits });
        };
        for secs in 1..=4 {
            waits(secs, "1 pod left to evict");
        }
        waits(5, "1 pod left to evict");
        waits(6, "1 pod left to evict");
        waits(10, "1 pod left to evict");
        waits(15, "the budget web");
        waits(40, "the budget web");
        waits(45, "the budget web");
        progress.event(&Event::Ended {
            step: step(),
            elapsed: Duration::from_millis(45_200),
            end: StepEnd::Done,
        });
        assert_eq!(
            text(&buf),
            "[3/12] drain w-1 ...\n\
             [3/12] drain w-1: 5s, waiting for 1 pod left to evict\n\
             [3/12] drain w-1: 15s, waiting for the budget web\n\
             [3/12] drain w-1: 45s, waiting for the budget web\n\
             [3/12] drain w-1 done (45.2s)\n"
        );
    }

    #[test]
    fn one_step_is_one_step() {
        let (progress, buf) = sink(ProgressFormat::Text);
        progress.event(&Event::AsPlanned { left: 1 });
        progress.event(&Event::Replanned { total: 1, was: 2, left: 1, first: 1, why: "w-1 is gone" });
        assert_eq!(
            text(&buf),
            "-- looked at the world again: 1 step to go, as planned\n\
             -- looked at the world again, and the plan changed: 1 step in all (was 2): w-1 is gone; the one \
             left is numbered 1\n"
        );
    }

    #[test]
    fn json_events_name_the_step_and_messages_are_events_too() {
        let (progress, buf) = sink(ProgressFormat::Json);
        progress.event(&Event::Started(step()));
        progress.say("took the lock of pool w");
        progress.event(&Event::Replanned {
            total: 15,
            was: 16,
            left: 7,
            first: 9,
            why: "no longer stop w-2 (w)",
        });
        let lines: Vec<serde_json::Value> =
            text(&buf).lines().map(|l| serde_json::from_str(l).expect("one JSON object a line")).collect();
        assert_eq!(lines[0]["event"], "start");
        assert_eq!((lines[0]["step"].as_u64(), lines[0]["action"].as_str()), (Some(3), Some("drain")));
        assert_eq!(lines[1], serde_json::json!({"event": "message", "message": "took the lock of pool w"}));
        assert_eq!(
            lines[2],
            serde_json::json!({"event": "replanned", "total": 15, "was": 16, "why": "no longer stop w-2 (w)"})
        );
    }

    #[test]
    fn the_live_line_fits_one_row_of_the_terminal() {
        let line = "[3/12] drain workers-1a2b3c4d5e-k2x9p 12s, waiting for 1 pod left to evict".to_owned();
        assert_eq!(fit(line.clone(), None), line, "no terminal width: as it is");
        assert_eq!(fit(line.clone(), Some(200)), line);
        let cut = fit(line, Some(30));
        assert_eq!(cut.chars().count(), 29, "{cut}");
        assert!(cut.starts_with("[3/12] drain workers") && cut.ends_with('…'), "{cut}");
        assert_eq!(fit("abc".to_owned(), Some(1)), "abc", "no room to cut in");
    }
}
