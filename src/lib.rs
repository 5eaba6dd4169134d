//! Cloudly: the serve.zone cluster controller.
#![forbid(unsafe_code)]

pub mod contract;
