//! The byte streams the NBD server and client talk over: TCP and unix sockets, and (in
//! `tls`) the two halves of an encrypted connection.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// A byte stream the server can talk over (TCP or unix socket).
pub trait Connection: Read + Write + Send + 'static {
    fn try_clone_connection(&self) -> io::Result<Box<dyn Connection>>;
    fn shutdown_both(&self);
    fn set_read_poll(&self, interval: Option<Duration>) -> io::Result<()>;
    fn set_write_limit(&self, limit: Option<Duration>) -> io::Result<()>;
    /// Ends the session politely before the socket closes (TLS: close_notify).
    fn close_gracefully(&mut self) {}
}

/// TCP and unix sockets are connections alike: their own clones, timeouts and shutdown.
macro_rules! socket_connection {
    ($socket:ty) => {
        impl Connection for $socket {
            fn try_clone_connection(&self) -> io::Result<Box<dyn Connection>> {
                Ok(Box::new(self.try_clone()?))
            }
            fn shutdown_both(&self) {
                let _ = self.shutdown(Shutdown::Both);
            }
            fn set_read_poll(&self, interval: Option<Duration>) -> io::Result<()> {
                self.set_read_timeout(interval)
            }
            fn set_write_limit(&self, limit: Option<Duration>) -> io::Result<()> {
                self.set_write_timeout(limit)
            }
        }
    };
}

socket_connection!(TcpStream);
socket_connection!(UnixStream);
