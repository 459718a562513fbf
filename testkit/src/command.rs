//! The built `gaffer` command, run by the tests as a child process.
//!
//! Only the command's own tests have the binary (cargo builds it for them
//! and names it in `CARGO_BIN_EXE_gaffer`), so they give its path:
//! `Gaffer::new(env!("CARGO_BIN_EXE_gaffer")).arg("--dir").arg(dir)`.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// The variables the command reads, cleared for every run: a test sets the
/// ones it means, and the shell that runs the tests leaks none.
const ITS_VARIABLES: [&str; 5] = [
    "GAFFER_KEY_FILE",
    "GAFFER_KEYS",
    "GAFFER_WEB_TOKEN",
    "GAFFER_WEB_USER",
    "GAFFER_WEB_PASSWORD",
];

/// The `gaffer` binary with the arguments every run starts with (where the
/// store is: `--dir DIR`, `--url URL`, `--shards …`) and the environment
/// every run has.
#[derive(Clone, Debug)]
pub struct Gaffer {
    bin: PathBuf,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
}

impl Gaffer {
    /// The binary at `bin`, no argument yet.
    pub fn new(bin: impl Into<PathBuf>) -> Self {
        Self {
            bin: bin.into(),
            args: Vec::new(),
            envs: Vec::new(),
        }
    }

    /// Every run starts with `arg`.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Every run starts with `args`.
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Every run has `key=value` in its environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.envs
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Every run has `vars` in its environment.
    pub fn envs<I, K, V>(self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        vars.into_iter().fold(self, |cmd, (k, v)| cmd.env(k, v))
    }

    /// The command for a run with `args` after the common ones, to adjust
    /// (its input and output) before running it.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        for var in ITS_VARIABLES {
            cmd.env_remove(var);
        }
        cmd.args(&self.args).args(args).envs(self.envs.clone());
        cmd
    }

    /// Run with `args`; its status and output, whatever they are.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .unwrap_or_else(|e| panic!("the gaffer binary {} runs: {e}", self.bin.display()))
    }

    /// Run with `args`, which must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "gaffer {args:?}: {:?}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Run with `args --json`, which must succeed; the document it prints.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let text = self.ok(&all);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("gaffer {args:?} --json: {e}\n{text}"))
    }

    /// Start a run with `args` that lasts (`web`, `batch --watch`): its
    /// stdout piped, and killed when the handle drops, so a failed
    /// assertion leaves none running.
    pub fn spawn(&self, args: &[&str]) -> tokio::process::Child {
        tokio::process::Command::from(self.command(args))
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("the gaffer binary {} starts: {e}", self.bin.display()))
    }
}
