//! A holder frozen inside its fenced transaction (F5, docs/design.md §4):
//! its transaction ends with its tenure. The commit is checked on the
//! server (`commit_check`), a transaction nobody sends anything on is ended
//! within one lease so the successor is not stalled (`idle_bound`), and the
//! whole drill with a real process stopped by `SIGSTOP` (`child_process`).

mod child_process;
mod commit_check;
mod idle_bound;
