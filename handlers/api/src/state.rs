//! What every route shares: the counter and the scope check ([`Api`]), and
//! the time a request is handled at ([`Now`]).

use std::convert::Infallible;

use axum::Extension;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use hybrid_counter::{Counter, EpochMillis, Scope, now_millis};
use lambda_http::request::RequestContext;

use crate::error::ApiError;
use crate::scope_auth::{Authorizer, NoTags, PrincipalTags};

/// What every route shares: the counter and the scope check.
pub struct Api<S, T = NoTags> {
    pub counter: Counter<S>,
    pub authorizer: Authorizer<T>,
}

impl<S, T: PrincipalTags> Api<S, T> {
    /// `403 ScopeForbidden` unless the caller (the function URL's request
    /// context) may act on `scope`.
    pub(crate) async fn authorize(
        &self,
        context: Option<Extension<RequestContext>>,
        scope: &Scope,
    ) -> Result<(), ApiError> {
        let context = context.as_ref().map(|Extension(context)| context);
        self.authorizer
            .check(context, scope.as_str())
            .await
            .map_err(|reason| ApiError::ScopeForbidden { reason })
    }
}

/// The time a request is handled at: the one [`crate::handle`] was given, else the clock's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now(pub(crate) EpochMillis);

impl<S: Send + Sync> FromRequestParts<S> for Now {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(parts.extensions.get().copied().unwrap_or_else(|| Now(now_millis())))
    }
}
