//! What the tests' training pods run. At start it prints its configuration — one line,
//! `workload: config {"argv":[...],"env":{...}}` (every environment variable but Kubernetes'
//! service links) — so a test can read from the pod's log which runtime it was started from.
//! Then it runs until SIGTERM (or SIGINT), and keeps running `WORKLOAD_TERM_GRACE_SECONDS`
//! (default 0) after it before exiting 0, so a test can stage a pod that is still terminating.
//!
//! `WORKLOAD_RUN_SECONDS`: exit on its own after that long, with `WORKLOAD_EXIT_CODE`
//! (default 0). `WORKLOAD_HEARTBEAT_SECONDS`: print a line that often.

use holdfast_node_programs as sig;
use std::io::Write;
use std::time::{Duration, Instant};

fn seconds(name: &str) -> Option<f64> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| *s >= 0.0)
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Kubernetes' service-link variables (`FOO_SERVICE_HOST`, `FOO_SERVICE_PORT[_NAME]`,
/// `FOO_PORT=tcp://...`, `FOO_PORT_443_TCP[_PROTO|_PORT|_ADDR]`).
fn service_link(name: &str, value: &str) -> bool {
    if name.ends_with("_SERVICE_HOST") || name.contains("_SERVICE_PORT") {
        return true;
    }
    if name.ends_with("_PORT") && value.contains("://") {
        return true;
    }
    name.split("_PORT_").skip(1).any(|rest| {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        digits > 0
            && ["_TCP", "_UDP", "_SCTP"]
                .iter()
                .any(|p| rest[digits..].starts_with(p))
    })
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "workload: {line}");
    let _ = out.flush();
}

fn main() {
    sig::catch(sig::SIGTERM);
    sig::catch(sig::SIGINT);
    let argv: Vec<String> = std::env::args().collect();
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, v)| !service_link(k, v))
        .collect();
    env.sort();
    let argv_json: Vec<String> = argv.iter().map(|a| json_string(a)).collect();
    let env_json: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{}:{}", json_string(k), json_string(v)))
        .collect();
    say(&format!(
        "config {{\"argv\":[{}],\"env\":{{{}}}}}",
        argv_json.join(","),
        env_json.join(",")
    ));

    let grace = seconds("WORKLOAD_TERM_GRACE_SECONDS").unwrap_or(0.0);
    let run_for = seconds("WORKLOAD_RUN_SECONDS").map(Duration::from_secs_f64);
    let heartbeat = seconds("WORKLOAD_HEARTBEAT_SECONDS")
        .filter(|s| *s > 0.0)
        .map(Duration::from_secs_f64);
    let exit_code: i32 = std::env::var("WORKLOAD_EXIT_CODE")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let start = Instant::now();
    let mut last_beat = start;
    say("running");
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let s = sig::take();
        if s == sig::SIGTERM || s == sig::SIGINT {
            say(&format!("signal {s} received; exiting in {grace}s"));
            let until = Instant::now() + Duration::from_secs_f64(grace);
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            say("exiting after the grace");
            std::process::exit(0);
        }
        if let Some(every) = heartbeat
            && last_beat.elapsed() >= every
        {
            last_beat = Instant::now();
            say(&format!("heartbeat {:.0}s", start.elapsed().as_secs_f64()));
        }
        if let Some(limit) = run_for
            && start.elapsed() >= limit
        {
            say(&format!(
                "ran {}s; exiting with {exit_code}",
                limit.as_secs_f64()
            ));
            std::process::exit(exit_code);
        }
    }
}
