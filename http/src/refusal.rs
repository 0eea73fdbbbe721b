//! The one error shape of every refusal at the door: `{"error": {"code", "message"}}`.

/// A request refused before it reached the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status: 400, 401, 403, 413 or 429.
    pub status: u16,
    /// `BAD_REQUEST`, `UNAUTHORIZED`, `FORBIDDEN`, `PAYLOAD_TOO_LARGE` or
    /// `TOO_MANY_REQUESTS`.
    pub code: &'static str,
    /// What is wrong and what to do, for a person.
    pub message: String,
}

impl Refusal {
    /// `401 UNAUTHORIZED` (answered with `WWW-Authenticate: Bearer`).
    pub fn unauthorized(message: impl Into<String>) -> Refusal {
        Refusal {
            status: 401,
            code: "UNAUTHORIZED",
            message: message.into(),
        }
    }

    /// `403 FORBIDDEN`.
    pub fn forbidden(message: impl Into<String>) -> Refusal {
        Refusal {
            status: 403,
            code: "FORBIDDEN",
            message: message.into(),
        }
    }

    /// `400 BAD_REQUEST`.
    pub fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal {
            status: 400,
            code: "BAD_REQUEST",
            message: message.into(),
        }
    }

    /// `413 PAYLOAD_TOO_LARGE`.
    pub fn too_large(max_bytes: usize) -> Refusal {
        Refusal {
            status: 413,
            code: "PAYLOAD_TOO_LARGE",
            message: format!("the request body is over {max_bytes} bytes"),
        }
    }

    /// `429 TOO_MANY_REQUESTS`: the caller holds as many long requests as it may.
    pub fn too_many(message: impl Into<String>) -> Refusal {
        Refusal {
            status: 429,
            code: "TOO_MANY_REQUESTS",
            message: message.into(),
        }
    }

    /// Whether the answer carries `WWW-Authenticate: Bearer`.
    pub fn challenges(&self) -> bool {
        self.status == 401
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        serde_json::json!({"error": {"code": self.code, "message": self.message}}).to_string()
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}
