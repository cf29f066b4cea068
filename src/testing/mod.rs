//! Test support shared by the unit tests of every stage: builders for specs and worlds
//! ([`build`]), the simulated world that carries plan steps out ([`sim`]), and that world
//! behind the backend traits ([`fake`]).

pub(crate) mod build;
pub(crate) mod fake;
pub(crate) mod sim;

use std::io::Write;
use std::sync::{Arc, Mutex};

/// A progress writer whose output a test reads back through the shared buffer.
pub(crate) struct SharedBuf(pub(crate) Arc<Mutex<Vec<u8>>>);

/// A plain-lines progress sink, and the bytes it wrote.
pub(crate) fn progress() -> (crate::report::Progress, Arc<Mutex<Vec<u8>>>) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink =
        crate::report::Progress::new(Box::new(SharedBuf(buf.clone())), crate::report::ProgressUi::default());
    (sink, buf)
}

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
