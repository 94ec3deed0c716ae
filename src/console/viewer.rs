//! Who is looking at a page: what the frame shows and whether forms
//! carry a CSRF token. Decided per request by `access.rs`.

/// Who is looking.
pub(super) enum Viewer {
    /// No actor: pages only. `can_log_in` when a token login exists,
    /// `hooked` when the service's authorisation hook names actors.
    ReadOnly { can_log_in: bool, hooked: bool },
    /// May act, recorded as `name`; `csrf` goes into every form.
    /// `session` when through a token login (which can log out).
    Actor { name: String, csrf: String, session: bool },
}

impl Viewer {
    /// The CSRF token to put in an action form: the actor's; `None` when
    /// read-only.
    pub(super) fn csrf(&self) -> Option<&str> {
        match self {
            Viewer::Actor { csrf, .. } => Some(csrf),
            Viewer::ReadOnly { .. } => None,
        }
    }
}
