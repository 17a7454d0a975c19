//! A tiny stderr logger.
//!
//! The mock agent logs only to stderr (stdout belongs to the protocol) and is
//! meant to start fast and stay small, so it uses a ten-line logger instead of
//! `tracing-subscriber`. The level comes from `--log` / `KANDEV_MOCK_LOG`.

use std::sync::atomic::{AtomicU8, Ordering};

pub(crate) const ERROR: u8 = 1;
pub(crate) const WARN: u8 = 2;
pub(crate) const INFO: u8 = 3;
pub(crate) const DEBUG: u8 = 4;

static LEVEL: AtomicU8 = AtomicU8::new(INFO);

/// Sets the maximum level: `off`, `error`, `warn`, `info` (default) or `debug`.
pub(crate) fn init(level: &str) {
    let level = match level.trim().to_ascii_lowercase().as_str() {
        "off" | "none" => 0,
        "error" => ERROR,
        "warn" | "warning" => WARN,
        "debug" | "trace" => DEBUG,
        _ => INFO,
    };
    LEVEL.store(level, Ordering::Relaxed);
}

pub(crate) fn enabled(level: u8) -> bool {
    level <= LEVEL.load(Ordering::Relaxed)
}

pub(crate) fn write(level: u8, args: std::fmt::Arguments<'_>) {
    let name = match level {
        ERROR => "ERROR",
        WARN => "WARN",
        INFO => "INFO",
        _ => "DEBUG",
    };
    eprintln!("kandev-mock-agent {name} {args}");
}

macro_rules! log_at {
    ($level:expr, $($arg:tt)*) => {
        if $crate::log::enabled($level) {
            $crate::log::write($level, format_args!($($arg)*));
        }
    };
}

macro_rules! warning {
    ($($arg:tt)*) => { $crate::log::log_at!($crate::log::WARN, $($arg)*) };
}

macro_rules! info {
    ($($arg:tt)*) => { $crate::log::log_at!($crate::log::INFO, $($arg)*) };
}

macro_rules! debug {
    ($($arg:tt)*) => { $crate::log::log_at!($crate::log::DEBUG, $($arg)*) };
}

pub(crate) use {debug, info, log_at, warning};
