//! The fleet page (`fleet`): the holders seen recently, and what each runs.

use axum::extract::State;
use axum::http::request::Parts;
use axum::response::Response;
use maud::html;

use super::Shared;
use super::layout::{self, Base, During, Tab, enc, span, when};

/// Running keys listed per holder before "and N more".
const KEYS_SHOWN: usize = 20;

/// GET `fleet`.
pub(super) async fn page(State(console): State<Shared>, base: Base, parts: Parts) -> Response {
    let viewer = console.access.viewer(&console.options, &parts);
    let window = console.options.fleet_window;
    let during = During::Page {
        refresh: console.options.refresh.as_secs(),
    };
    let fleet = match console.reads.run(console.store.fleet(window)).await {
        Ok(fleet) => fleet,
        Err(err) => return layout::unavailable(&base, &viewer, err, during),
    };
    let now = fleet.server_now;
    let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
    let body = html! {
        h1 { "Fleet" }
        p { "Holders whose tenure of some key was live in the last " (span(window_ms))
            ", by the server clock. A replica is seen through its leases: one that ran nothing in that time is not listed." }
        @if fleet.holders.is_empty() {
            p.empty { "No holder seen." }
        } @else {
            table #fleet {
                thead { tr { th { "Holder" } th { "Runs in progress" } th { "Keys" } th { "Last seen" } } }
                tbody {
                    @for h in &fleet.holders {
                        tr.holder data-holder=(h.holder) {
                            td { bdi { (h.holder) } }
                            td.running { (h.running.len()) }
                            td {
                                @for key in h.running.iter().take(KEYS_SHOWN) {
                                    a href={ "key?key=" (enc(key)) } { bdi { (key) } } " "
                                }
                                @if h.running.len() > KEYS_SHOWN { "and " (h.running.len() - KEYS_SHOWN) " more" }
                            }
                            td { @if h.running.is_empty() { (when(h.last_seen, now)) } @else { "now (holding)" } }
                        }
                    }
                }
            }
        }
    };
    layout::page(
        &base,
        "Fleet",
        Tab::Fleet,
        &viewer,
        console.options.refresh.as_secs(),
        body,
    )
}
