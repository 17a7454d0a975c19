//! A service crate's `Application`, run in-process until it is stopped:
//! for the tests that start a stack (the browser tests' [`super`] and the
//! API tests' `stack`, which includes this file too).

use kandev_common::CancellationToken;
use tokio::task::JoinHandle;

/// A service running in the test's runtime.
pub struct Service {
    pub stop: CancellationToken,
    pub handle: JoinHandle<()>,
}

impl Service {
    /// Asks it to stop, without waiting.
    pub fn cancel(&self) {
        self.stop.cancel();
    }

    /// Waits (at most 10 s) for it to have stopped.
    pub async fn stopped(self) {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), self.handle).await;
    }
}

/// Builds the `Application` of service crate `$service` with `$settings`
/// and runs it until its [`Service`] is cancelled: `(its address, the
/// Service)`. `$name` names it in the panics of a failed build or run.
macro_rules! serve {
    ($service:ident, $settings:expr, $name:literal) => {{
        let app = $service::Application::build($settings)
            .await
            .expect(concat!($name, " builds"));
        let addr = app.local_addr();
        let (stop, handle) = kandev_testkit::run_until_cancelled(concat!($name, " runs"), |stop| {
            app.run_until_stopped(stop)
        });
        (addr, Service { stop, handle })
    }};
}
pub(crate) use serve;
