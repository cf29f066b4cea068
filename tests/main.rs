mod cli;
mod source;
mod spec;
mod support;
