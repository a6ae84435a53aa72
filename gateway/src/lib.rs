//! airlock's gateway crate. Today it holds the command line for the policy tools; the HTTP
//! gateway (`airlock serve`) builds on the same crate.

pub mod cli;
