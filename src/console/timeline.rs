//! The tenure timeline and the strip of recent outcomes: inline SVG built
//! from the run history, the operators' actions and the pauses, as pure
//! functions from data to markup.
//!
//! What it guarantees:
//! - every recorded run that overlaps the window is one bar (`g.run`),
//!   from its claim to its release, in its holder's lane, classed by its
//!   outcome; a tenure in progress is one more bar (`g.live`), never
//!   counted as a run;
//! - keys, holders, actors and reasons are text: maud escapes them in SVG
//!   as in HTML, and each is wrapped in FSI … PDI, so none reorders the
//!   console's own words; nothing here is a script, a style attribute or
//!   a link to elsewhere, so the console's CSP holds unchanged (colours
//!   come from its stylesheet, by class);
//! - it reads no clock: "now" is the server's, passed in.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use maud::{Markup, html};

use super::layout::span;
use crate::lease::{ActionRecord, LeaseInfo, Pause, RunRecord, Target};
use crate::operator::OperatorAction;

/// The window a page shows unless `window` says otherwise.
pub(super) const DEFAULT_WINDOW: Duration = Duration::from_secs(3600);
/// The narrowest window: a minute.
const MIN_WINDOW: Duration = Duration::from_secs(60);
/// The widest window: a week.
const MAX_WINDOW: Duration = Duration::from_secs(7 * 86_400);
/// The windows offered as links above the timeline.
const OFFERED: [&str; 5] = ["15m", "1h", "6h", "24h", "7d"];

/// Drawing units (the SVG scales to the page's width).
const WIDTH: f64 = 1000.0;
const LABEL: f64 = 150.0;
const PLOT: f64 = WIDTH - LABEL - 12.0;
const AXIS: f64 = 22.0;
const LANE: f64 = 24.0;
const BAR: f64 = 16.0;
/// Average width of a label character at the timeline's font size.
const CHAR: f64 = 6.4;
/// Longest holder name shown in full in its lane's label.
const HOLDER_CHARS: usize = 20;

/// Reads the `window` parameter: a whole number and a unit (`s`, `m`,
/// `h` or `d`), from a minute to a week; empty for the default hour.
/// The error page's sentence for a `window` parameter [`parse_window`]
/// refuses.
pub(super) const NOT_A_WINDOW: &str = "Not a timeline window (`window`): use a whole number of minutes, hours \
                                       or days such as 30m, 6h or 2d, from 1m to 7d.";

pub(super) fn parse_window(text: &str) -> Result<Duration, String> {
    const FIX: &str = "use a whole number of minutes, hours or days such as 30m, 6h or 2d, from 1m to 7d";
    if text.is_empty() {
        return Ok(DEFAULT_WINDOW);
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_secs = match unit {
        "s" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?} has no unit s, m, h or d: {FIX}")),
    };
    let Ok(number) = number.parse::<u64>() else {
        return Err(format!("{text:?} does not start with a whole number: {FIX}"));
    };
    let window = Duration::from_secs(number.saturating_mul(unit_secs));
    if !(MIN_WINDOW..=MAX_WINDOW).contains(&window) {
        return Err(format!("{text:?} is outside 1m to 7d: {FIX}"));
    }
    Ok(window)
}

/// The `window` parameter that reads back as `window`.
pub(super) fn window_param(window: Duration) -> String {
    let secs = window.as_secs();
    match secs {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Text from outside the console (a key, a holder, an actor) isolated for
/// a place that cannot hold a `<bdi>` (SVG text, a tooltip).
fn isolated(text: &str) -> String {
    super::layout::isolate(text)
}

/// One bar: a recorded run, or the tenure in progress.
struct Bar<'a> {
    key: &'a str,
    holder: &'a str,
    fence: i64,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    /// The run, or `None` for the tenure in progress.
    run: Option<&'a RunRecord>,
}

/// A revoke by an operator: a line across the lanes at its time.
struct Mark<'a> {
    /// The key revoked.
    target: &'a Target,
    at: DateTime<Utc>,
    action: OperatorAction,
    actor: &'a str,
    fence: Option<i64>,
}

/// A pause: shaded across the lanes while it was in force.
struct Shade<'a> {
    from: DateTime<Utc>,
    to: Option<DateTime<Utc>>,
    by: &'a str,
    what: String,
}

/// A timeline under construction: add runs, the tenure in progress,
/// actions and pauses, then [`render`](Timeline::render) it.
pub(super) struct Timeline<'a> {
    /// The key or job it shows, named in its title.
    about: &'a str,
    now: DateTime<Utc>,
    window: Duration,
    /// Whether bars name their key (a job's timeline spans several).
    with_keys: bool,
    bars: Vec<Bar<'a>>,
    marks: Vec<Mark<'a>>,
    shades: Vec<Shade<'a>>,
}

impl<'a> Timeline<'a> {
    /// An empty timeline of the key or job `about`, over the `window` up
    /// to the server's `now`.
    pub(super) fn new(about: &'a str, now: DateTime<Utc>, window: Duration, with_keys: bool) -> Self {
        Timeline {
            about,
            now,
            window,
            with_keys,
            bars: Vec::new(),
            marks: Vec::new(),
            shades: Vec::new(),
        }
    }

    fn from(&self) -> DateTime<Utc> {
        self.now - TimeDelta::from_std(self.window).unwrap_or(TimeDelta::MAX)
    }

    /// Adds each of `runs` that overlaps the window as a bar.
    pub(super) fn runs(mut self, runs: &'a [RunRecord]) -> Self {
        let from = self.from();
        for run in runs.iter().filter(|r| r.ended_at >= from && r.started_at <= self.now) {
            self.bars.push(Bar {
                key: &run.key,
                holder: &run.holder,
                fence: run.fence,
                start: run.started_at,
                end: run.ended_at,
                run: Some(run),
            });
        }
        self
    }

    /// Adds the tenure in progress of `lease`, if it is held.
    pub(super) fn live(mut self, lease: &'a LeaseInfo) -> Self {
        if lease.is_held() {
            self.bars.push(Bar {
                key: &lease.key,
                holder: &lease.holder,
                fence: lease.fence,
                start: lease.acquired_at,
                end: self.now,
                run: None,
            });
        }
        self
    }

    /// Adds the operators' revokes in the window as marks, and their
    /// pauses (paired with the resume that lifted each) as shades; a pause
    /// still in force (in `in_force`) is shaded up to now.
    pub(super) fn actions(mut self, actions: &'a [ActionRecord], in_force: &[&'a Pause]) -> Self {
        let from = self.from();
        // Oldest first, so a resume closes the pause before it.
        let mut open: BTreeMap<String, &ActionRecord> = BTreeMap::new();
        for a in actions.iter().rev() {
            let done = a.outcome.as_deref().unwrap_or("");
            let target = a.target.to_string();
            match OperatorAction::parse(&a.action) {
                Some(action @ (OperatorAction::Revoke | OperatorAction::ForceRevoke))
                    if a.fence.is_some() && a.at >= from =>
                {
                    self.marks.push(Mark {
                        target: &a.target,
                        at: a.at,
                        action,
                        actor: &a.actor,
                        fence: a.fence,
                    })
                }
                Some(OperatorAction::Pause | OperatorAction::PauseCancel) if done.starts_with("paused") => {
                    open.entry(target).or_insert(a);
                }
                Some(OperatorAction::Resume) if done.starts_with("resumed") => {
                    if let Some(p) = open.remove(&target) {
                        self.shade(p.at, Some(a.at), &p.actor, target);
                    }
                }
                _ => {}
            }
        }
        for p in in_force {
            self.shade(p.paused_at, None, &p.paused_by, p.target.to_string());
        }
        self
    }

    fn shade(&mut self, from: DateTime<Utc>, to: Option<DateTime<Utc>>, by: &'a str, what: String) {
        if to.is_none_or(|to| to >= self.from()) {
            self.shades.push(Shade { from, to, by, what });
        }
    }

    /// Recorded runs drawn.
    #[cfg(test)]
    fn run_count(&self) -> usize {
        self.bars.iter().filter(|b| b.run.is_some()).count()
    }

    /// The x coordinate of `at`, clamped to the window.
    fn x(&self, at: DateTime<Utc>) -> f64 {
        let window = self.window.as_secs_f64().max(1.0);
        let offset = (at - self.from()).num_milliseconds() as f64 / 1000.0;
        LABEL + (offset / window).clamp(0.0, 1.0) * PLOT
    }

    /// The timeline as an `<svg>`, with links to other windows built from
    /// `link` (a relative URL ending in `&` or `?`); a sentence instead
    /// when there is nothing to draw.
    pub(super) fn render(&self, link: &str) -> Markup {
        let mut lanes: Vec<&str> = self.bars.iter().map(|b| b.holder).collect();
        lanes.sort_unstable();
        lanes.dedup();
        let lane_of = |holder: &str| lanes.binary_search(&holder).unwrap_or(0);
        let rows = lanes.len().max(1);
        let height = AXIS + rows as f64 * LANE + 4.0;
        let bottom = AXIS + rows as f64 * LANE;
        let current = window_param(self.window);
        let runs = self.bars.iter().filter(|b| b.run.is_some()).count();
        html! {
            nav.windows {
                "Last "
                @for w in OFFERED {
                    @if w == current { strong { (w) } } @else { a href={ (link) "window=" (w) } { (w) } }
                    " "
                }
                span.muted #timeline-count { (runs) " runs in the window" }
            }
            @if self.bars.is_empty() && self.marks.is_empty() && self.shades.is_empty() {
                p.empty #timeline-empty { "No run, revoke or pause in the last " (span(self.window.as_millis().try_into().unwrap_or(u64::MAX))) "." }
            } @else {
                svg.timeline #timeline xmlns="http://www.w3.org/2000/svg" role="img"
                    viewBox={ "0 0 " (WIDTH) " " (height) } data-runs=(runs) {
                    title { (isolated(self.about)) ": tenures over the last " (span(self.window.as_millis().try_into().unwrap_or(u64::MAX))) }
                    (self.axis(bottom))
                    @for (i, holder) in lanes.iter().enumerate() {
                        @let y = AXIS + i as f64 * LANE;
                        rect.lane x="0" y=(y) width=(WIDTH) height=(LANE) {}
                        text.holder x="4" y=(y + LANE / 2.0 + 4.0) {
                            title { (isolated(holder)) }
                            (isolated(&shorten(holder, HOLDER_CHARS)))
                        }
                    }
                    @for s in &self.shades {
                        @let (x0, x1) = (self.x(s.from), self.x(s.to.unwrap_or(self.now)));
                        g.pause {
                            title { "paused (" (s.what) ") by " (isolated(s.by)) ", "
                                    (match s.to { Some(to) => span_ms(to - s.from), None => "still in force".to_owned() }) }
                            rect x=(x0) y=(AXIS) width=((x1 - x0).max(2.0)) height=(bottom - AXIS) {}
                            text x=(x0 + 3.0) y=(bottom - 3.0) { "paused" }
                        }
                    }
                    @for b in &self.bars {
                        @let (x0, x1) = (self.x(b.start), self.x(b.end));
                        @let w = (x1 - x0).max(1.5);
                        @let y = AXIS + lane_of(b.holder) as f64 * LANE + (LANE - BAR) / 2.0;
                        @let took = span_ms(b.end - b.start);
                        @let class = match b.run { Some(r) => format!("run {}", r.outcome), None => "live".to_owned() };
                        g class=(class) data-fence=(b.fence) {
                            title { (self.describe(b, &took)) }
                            rect.bar x=(x0) y=(y) width=(w) height=(BAR) {}
                            @if let Some(label) = fitting(w, b.fence, &took) {
                                text.fence x=(x0 + 3.0) y=(y + BAR - 4.0) { (label) }
                            }
                        }
                    }
                    @for m in &self.marks {
                        @let x = self.x(m.at);
                        g class={ "mark " (m.action) } {
                            title { (m.action) @if self.with_keys { " of " (isolated(m.target.name())) } " by " (isolated(m.actor))
                                    @if let Some(f) = m.fence { ": fence " (f) " handed out, every earlier tenure fenced out" } }
                            line x1=(x) x2=(x) y1=(AXIS - 6.0) y2=(bottom) {}
                            path d={ "M" (x - 5.0) " " (AXIS - 10.0) " h10 l-5 6 z" } {}
                        }
                    }
                }
            }
        }
    }

    /// What a bar's tooltip says.
    fn describe(&self, b: &Bar<'_>, took: &str) -> String {
        let key = if self.with_keys {
            format!("{} · ", isolated(b.key))
        } else {
            String::new()
        };
        match b.run {
            Some(r) => {
                let reason = r
                    .reason
                    .as_deref()
                    .map(|x| format!(" ({})", isolated(x)))
                    .unwrap_or_default();
                format!(
                    "{key}run {} · fence {} · {} · {}{reason} · took {took} · started {}",
                    r.run_no,
                    r.fence,
                    isolated(b.holder),
                    r.outcome,
                    r.started_at.format("%H:%M:%S%.3f UTC"),
                )
            }
            None => format!(
                "{key}in progress · fence {} · {} · held for {took}",
                b.fence,
                isolated(b.holder)
            ),
        }
    }

    /// The time axis: ticks at the window's quarters, labelled from now.
    fn axis(&self, bottom: f64) -> Markup {
        let window = TimeDelta::from_std(self.window).unwrap_or(TimeDelta::MAX);
        html! {
            g.axis {
                @for q in 0..=4 {
                    @let at = self.from() + window * q / 4;
                    @let x = self.x(at);
                    line x1=(x) x2=(x) y1=(AXIS - 4.0) y2=(bottom) {}
                    text x=(x) y=(AXIS - 8.0) text-anchor=(if q == 0 { "start" } else if q == 4 { "end" } else { "middle" }) {
                        @if q == 4 { "now" } @else { (span_ms(self.now - at)) " ago" }
                    }
                }
            }
        }
    }
}

/// A span of time for people.
fn span_ms(delta: TimeDelta) -> String {
    span(delta.num_milliseconds().max(0).unsigned_abs())
}

/// `text` cut to `chars` characters, with `…` when cut.
fn shorten(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(chars - 1).collect();
    cut.push('…');
    cut
}

/// The label a bar `width` wide can hold: its fence and duration, its
/// fence alone, or nothing.
fn fitting(width: f64, fence: i64, took: &str) -> Option<String> {
    let full = format!("fence {fence} · {took}");
    let short = fence.to_string();
    let fits = |text: &str| text.chars().count() as f64 * CHAR + 6.0 <= width;
    if fits(&full) {
        Some(full)
    } else if fits(&short) {
        Some(short)
    } else {
        None
    }
}

/// A key's latest outcomes as small squares, oldest left: `runs` newest
/// first, as the history returns them. Its accessible name (`aria-label`,
/// and its `<title>` for tooltips) says the outcomes in words, newest
/// first, so a screen reader reads what the colours show.
pub(super) fn strip(runs: &[&RunRecord]) -> Markup {
    const SIDE: f64 = 10.0;
    const STEP: f64 = 12.0;
    let width = STEP * runs.len() as f64;
    let label = strip_label(runs);
    html! {
        @if !runs.is_empty() {
            svg.strip xmlns="http://www.w3.org/2000/svg" role="img" aria-label=(label) width=(width) height=(SIDE)
                viewBox={ "0 0 " (width) " " (SIDE) } data-runs=(runs.len()) {
                title { (label) }
                @for (i, r) in runs.iter().rev().enumerate() {
                    rect class=(r.outcome) x=(i as f64 * STEP) y="0" width=(SIDE) height=(SIDE) {
                        title { "run " (r.run_no) " · fence " (r.fence) " · " (r.outcome)
                                " · took " (span_ms(r.ended_at - r.started_at)) }
                    }
                }
            }
        }
    }
}

/// The outcome strip's name: `Last 3 runs, newest first: succeeded,
/// failed, succeeded`.
fn strip_label(runs: &[&RunRecord]) -> String {
    let outcomes: Vec<&str> = runs.iter().map(|r| r.outcome.as_str()).collect();
    let runs = match outcomes.len() {
        1 => "Last run".to_owned(),
        n => format!("Last {n} runs, newest first"),
    };
    format!("{runs}: {}", outcomes.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::RunOutcome;

    fn at(secs_ago: i64, now: DateTime<Utc>) -> DateTime<Utc> {
        now - TimeDelta::seconds(secs_ago)
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z")
            .expect("a time")
            .with_timezone(&Utc)
    }

    fn run(key: &str, holder: &str, run_no: i64, started: i64, ended: i64) -> RunRecord {
        let now = now();
        RunRecord {
            key: key.to_owned(),
            run_no,
            job_name: None,
            fence: run_no * 10,
            holder: holder.to_owned(),
            scheduled_for: None,
            started_at: at(started, now),
            ended_at: at(ended, now),
            outcome: if run_no % 2 == 0 {
                RunOutcome::Failed
            } else {
                RunOutcome::Succeeded
            },
            reason: None,
            error: None,
            earlier_life: false,
        }
    }

    #[test]
    fn windows_read_as_a_number_and_a_unit_within_a_minute_and_a_week() {
        assert_eq!(parse_window(""), Ok(DEFAULT_WINDOW));
        assert_eq!(parse_window("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_window("6h"), Ok(Duration::from_secs(6 * 3600)));
        assert_eq!(parse_window("7d"), Ok(MAX_WINDOW));
        assert_eq!(parse_window("90s"), Ok(Duration::from_secs(90)));
        for bad in ["8d", "30s", "h", "1x", "-1h", "1.5h", "99999999999999999999d", "1 h"] {
            let err = parse_window(bad).expect_err(bad);
            assert!(err.contains("30m, 6h or 2d"), "{bad}: {err}");
        }
        for w in ["15m", "1h", "6h", "24h", "7d", "90s"] {
            let parsed = parse_window(w).expect(w);
            assert_eq!(parse_window(&window_param(parsed)), Ok(parsed), "{w}");
        }
    }

    #[test]
    fn each_run_in_the_window_is_one_bar_in_its_holders_lane() {
        let runs = vec![
            run("k", "replica-b", 3, 1000, 400),
            run("k", "replica-a", 2, 1400, 1380),
            run("k", "replica-a", 1, 7200, 7100),
        ];
        let timeline = Timeline::new("k", now(), DEFAULT_WINDOW, false).runs(&runs);
        assert_eq!(timeline.run_count(), 2, "the run two hours ago is outside the hour");
        let svg = timeline.render("key?key=k&").into_string();
        assert_eq!(svg.matches("<g class=\"run ").count(), 2);
        assert_eq!(svg.matches("<rect class=\"lane\"").count(), 2, "one lane per holder");
        assert!(svg.contains("<g class=\"run failed\" data-fence=\"20\">"), "{svg}");
        assert!(
            svg.contains("fence 30 · 10 min"),
            "a wide bar carries its fence and duration"
        );
        assert!(svg.contains("took 20 s"), "every bar's tooltip says how long it took");
        assert!(svg.contains("href=\"key?key=k&amp;window=6h\""), "{svg}");
        // Inline SVG in an HTML page: `<rect …>` without its end tag would
        // hold every element after it (a browser draws none of them).
        for element in ["rect", "line", "path", "text", "g"] {
            let open = svg.matches(&format!("<{element} ")).count();
            assert_eq!(
                open,
                svg.matches(&format!("</{element}>")).count(),
                "<{element}> closed: {svg}"
            );
        }
    }

    #[test]
    fn at_two_hundred_runs_bars_are_thin_and_carry_no_label_that_does_not_fit() {
        // One run every 18 s over the hour, each 2 s long.
        let runs: Vec<RunRecord> = (0..200)
            .map(|i| run("k", "replica-a", 200 - i, 18 * i + 2, 18 * i))
            .collect();
        let svg = Timeline::new("k", now(), DEFAULT_WINDOW, false)
            .runs(&runs)
            .render("?")
            .into_string();
        assert_eq!(svg.matches("<g class=\"run ").count(), 200);
        assert_eq!(
            svg.matches("<text class=\"fence\"").count(),
            0,
            "no label fits a 1.5-unit bar"
        );
    }

    #[test]
    fn hostile_keys_and_holders_stay_text_inside_the_svg() {
        let hostile = "<script>alert(1)</script>";
        let holder = "\"><img src=x onerror=alert(1)>";
        let runs = vec![run(hostile, holder, 1, 100, 50)];
        let svg = Timeline::new(hostile, now(), DEFAULT_WINDOW, true)
            .runs(&runs)
            .render("?")
            .into_string();
        assert!(!svg.contains("<script"), "{svg}");
        assert!(!svg.contains("<img"), "{svg}");
        assert!(
            svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "the key is text: {svg}"
        );
        assert!(svg.contains("<title>\u{2068}&lt;script&gt;"), "in the title too: {svg}");
        assert!(
            svg.contains("\u{2068}&quot;&gt;&lt;img"),
            "the holder is isolated text: {svg}"
        );
    }

    #[test]
    fn revokes_are_marked_and_pauses_shaded_until_their_resume() {
        let now = now();
        let target = crate::lease::Target::key("k").unwrap();
        let action = |name: &str, ago: i64, outcome: &str, fence: Option<i64>| ActionRecord {
            target: target.clone(),
            action: name.to_owned(),
            actor: "alice".to_owned(),
            at: at(ago, now),
            outcome: Some(outcome.to_owned()),
            fence,
        };
        // Newest first, as the store returns them.
        let actions = vec![
            action(
                "force-release",
                60,
                "ended the tenure of replica-a (fence 33)",
                Some(43),
            ),
            action("resume", 600, "resumed: 0 overdue keys woken", None),
            action("pause", 900, "paused: 1 key, 0 running", None),
            action("release", 9000, "ended", Some(12)),
        ];
        let svg = Timeline::new("k", now, DEFAULT_WINDOW, false)
            .actions(&actions, &[])
            .render("?")
            .into_string();
        // A row under the older name (`force-release`) is marked as what it
        // is: a forced revoke.
        assert_eq!(svg.matches("<g class=\"mark force-revoke\">").count(), 1);
        assert!(svg.contains("fence 43 handed out"), "{svg}");
        assert_eq!(
            svg.matches("class=\"mark ").count(),
            1,
            "the revoke before the window is not drawn"
        );
        assert_eq!(svg.matches("<g class=\"pause\">").count(), 1);
        assert!(svg.contains("by \u{2068}alice\u{2069}, 5 min"), "{svg}");
    }

    #[test]
    fn the_strip_shows_the_latest_outcomes_oldest_first() {
        let runs = [run("k", "a", 2, 30, 20), run("k", "a", 1, 60, 50)];
        let refs: Vec<&RunRecord> = runs.iter().collect();
        let strip = strip(&refs).into_string();
        let first = strip.find("class=\"succeeded\"").expect("run 1");
        let second = strip.find("class=\"failed\"").expect("run 2");
        assert!(first < second, "{strip}");
        assert_eq!(super::strip(&[]).into_string(), "");
    }
}
