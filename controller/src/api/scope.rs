//! Each hold API request's connection, as the handlers need it: its source address (for the
//! failed-authentication budget), admitting it once its caller is allowed (it then counts
//! against the caller's user name, not its source address, and the request against the
//! user's requests in flight), and closing it after a refusal (no keep-alive for a refused
//! caller: its connection goes back to the pool at once).
//!
//! The router's [`layer`] puts the request's scope in a task-local for the handler's whole
//! run; outside one (a router served without a `holdfast_serve` server), every function here
//! does nothing.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::{extract::Request, middleware::Next, response::Response};
use holdfast_serve::{CloseReason, ConnectionHandle};

use super::limits::{Budget, Shed, UserRequest};

/// One request's scope.
#[derive(Debug)]
struct RequestScope {
    connection: Option<ConnectionHandle>,
    /// The allowed caller's request, counted until the scope ends.
    user: Mutex<Option<UserRequest>>,
}

tokio::task_local! {
    static REQUEST: Arc<RequestScope>;
}

/// The middleware: runs the handler inside the request's scope.
pub async fn layer(req: Request, next: Next) -> Response {
    let scope = Arc::new(RequestScope {
        connection: req.extensions().get::<ConnectionHandle>().cloned(),
        user: Mutex::new(None),
    });
    REQUEST.scope(scope, next.run(req)).await
}

/// The source address of the request's connection.
pub fn source() -> Option<IpAddr> {
    REQUEST
        .try_with(|s| s.connection.as_ref().map(ConnectionHandle::source))
        .ok()
        .flatten()
}

/// The request's caller, `user`, is allowed: admit its connection (once it is, it counts
/// against `user`) and count the request against `user` until it is answered.
pub fn allowed(budget: &Budget, user: &str) -> Result<(), Shed> {
    REQUEST
        .try_with(|s| {
            if let Some(connection) = &s.connection {
                connection
                    .admit(user)
                    .map_err(|_| budget.shed(Shed::ConnectionsPerUser))?;
            }
            let request = budget.user_request(user)?;
            *s.user.lock().unwrap_or_else(PoisonError::into_inner) = Some(request);
            Ok(())
        })
        .unwrap_or(Ok(()))
}

/// Close the connection once this answer is sent (an answer to a caller who was not
/// admitted on it).
pub fn close_after_answer() {
    let _ = REQUEST.try_with(|s| {
        if let Some(connection) = &s.connection {
            connection.close();
        }
    });
}

/// The caller was refused: close the connection once this answer is sent.
pub fn refused() {
    let _ = REQUEST.try_with(|s| {
        if let Some(connection) = &s.connection {
            connection.close_because(CloseReason::Refused);
        }
    });
}
