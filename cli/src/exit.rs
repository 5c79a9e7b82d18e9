//! Exit codes: one per member of the hold API's error set, and for what fails before an
//! answer (credentials, transport).

use serde_json::Value;

/// The exit-code table, as a literal for `concat!`.
macro_rules! exit_table {
    () => {
        "\
Exit codes:
  0   success (the hold API answered result Ok)
  1   an answer outside the set below (not the hold API's: check --server)
  2   usage (a bad flag or argument)
  3   Invalid       (400: malformed call, bad name, no deadline)
  4   Rejected      (409/404/403: StaleHold, DeadlinePassed, NoWorkload, NotFound,
                     NotHolder; final)
  5   PodsRemain    (423: pods of an earlier execution remain; retry later, or release
                     --wait; or hold --wait-stopped ran out while they remained)
  6   Unsupported   (501: a probe failed, or the ClusterQueue lacks the readmission check)
  7   Conflict      (503: eight preconditioned tries all met a 409; retry)
  8   Unknown       (504: the write's answer was lost; or the call was sent and its answer
                     never came back: read status after the CallBound)
  9   Unavailable   (503: drift asked of a replica not holding the Lease; retry)
  10  Unauthenticated or Forbidden (401/403 from the hold API, or from the apiserver while
                     finding the hold API or listing held jobs: token or RBAC)
  11  credentials   (the kubeconfig yields no bearer token, or its plugin or OIDC refresh failed)
  12  transport     (the hold API or the apiserver could not be reached: nothing was sent)
  13  incomplete    (status -A/-n: some held jobs could not be read; stderr names them)
  14  check failed  (holdfast check: a check of the install failed; each is printed with what
                     to do)"
    };
}

/// What the program's own `--help` ends with: examples, then the exit codes.
pub const ROOT_HELP: &str = concat!(
    "\
Examples:
  holdfast hold team-a/mnist --instance 3 --reason \"node lost\" --wait-stopped
  holdfast release team-a/mnist --instance 3 --wait=10m
  holdfast status -A
  holdfast check

",
    exit_table!()
);

pub const OTHER: u8 = 1;
pub const USAGE: u8 = 2;
pub const CREDENTIALS: u8 = 11;
pub const UNKNOWN: u8 = 8;
/// 401/403: from the hold API, or from the apiserver while finding it or listing held jobs.
pub const FORBIDDEN: u8 = 10;
pub const TRANSPORT: u8 = 12;
pub const INCOMPLETE: u8 = 13;
/// `check`: a check of the install failed.
pub const CHECK_FAILED: u8 = 14;
/// `PodsRemain`'s code: also `hold --wait-stopped` when pods remain at the end of its wait.
pub const PODS_REMAIN: u8 = 5;

/// The exit code of an answer of the hold API.
pub fn of_answer(status: u16, body: &Value) -> u8 {
    if (200..300).contains(&status) {
        // The hold API's success, and nothing else: a 200 from another server (a proxy's
        // default page) is not a placed hold.
        return if body.get("result").and_then(Value::as_str) == Some("Ok") {
            0
        } else {
            OTHER
        };
    }
    match body.get("error").and_then(Value::as_str) {
        Some("Invalid") => 3,
        Some("Rejected") => 4,
        Some("PodsRemain") => PODS_REMAIN,
        Some("Unsupported") => 6,
        Some("Conflict") => 7,
        Some("Unknown") => 8,
        Some("Unavailable") => 9,
        Some("Unauthenticated" | "Forbidden") => FORBIDDEN,
        _ => OTHER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_member_of_the_error_set_has_its_own_code() {
        let code = |status, error: &str| of_answer(status, &json!({"error": error}));
        assert_eq!(of_answer(200, &json!({"result": "Ok"})), 0);
        let codes = [
            code(400, "Invalid"),
            code(409, "Rejected"),
            code(423, "PodsRemain"),
            code(501, "Unsupported"),
            code(503, "Conflict"),
            code(504, "Unknown"),
            code(503, "Unavailable"),
            code(401, "Unauthenticated"),
        ];
        assert_eq!(codes, [3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(code(404, "Rejected"), 4);
        assert_eq!(
            code(403, "Rejected"),
            4,
            "NotHolder: another identity holds the hold"
        );
        assert_eq!(code(403, "Forbidden"), 10);
        assert_eq!(of_answer(502, &json!("bad gateway")), OTHER);
        assert_eq!(of_answer(200, &json!("<html>welcome</html>")), OTHER);
        assert_eq!(of_answer(200, &json!({"result": "Error"})), OTHER);
        for c in codes.into_iter().chain([CHECK_FAILED]) {
            assert!(
                ROOT_HELP.contains(&format!("\n  {c} ")),
                "{c} is not in the help table"
            );
        }
    }
}
