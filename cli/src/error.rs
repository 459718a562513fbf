//! The command's errors, each one line.

use gaffer_layout::EngineError;
use gaffer_ops::OpsError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A read of the store or a request failed.
    #[error("{0}")]
    Ops(#[from] OpsError),
    /// A command's input is not usable.
    #[error("{0}")]
    BadInput(String),
    /// The engine's layer refused.
    #[error("{0}")]
    Engine(#[from] EngineError),
    /// The queue could not be read.
    #[error("{0}")]
    Queue(#[from] taquba::Error),
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Output(String),
    /// The dashboard could not open its stores.
    #[error("{0}")]
    Web(#[from] gaffer_web::WebError),
    /// The dashboard's server failed.
    #[error("cannot serve: {0}")]
    Serve(std::io::Error),
    /// The async runtime did not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}
