//! `--web.listen-address`: the forms it accepts and the socket each binds.
//!
//! The forms are node_exporter's (Go's `net.Listen`), so that manifests and
//! units written for it work unchanged:
//! - `:PORT` — every address, IPv4 and IPv6: one dual-stack socket on `[::]`,
//!   or `0.0.0.0` alone where the kernel has IPv6 switched off;
//! - `IPV4:PORT` and `[IPV6]:PORT` — that address only;
//! - `HOST:PORT` — the first address the name resolves to that binds.

use socket2::{Domain, Protocol, Socket, Type};
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::str::FromStr;

/// Connections the kernel queues before cgperf accepts them.
const BACKLOG: i32 = 1024;

/// A parsed `--web.listen-address`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddress {
    /// `:PORT`: all addresses, both families.
    Any(u16),
    /// A literal address.
    Socket(SocketAddr),
    /// A name resolved when binding.
    Host(String, u16),
}

/// Why a listen address is not accepted or cannot be bound.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Not one of the accepted forms.
    #[error("`{given}`: {why} (write :PORT for all addresses, HOST:PORT, or [IPV6]:PORT)")]
    Syntax {
        /// What was given.
        given: String,
        /// What is wrong with it.
        why: String,
    },
    /// The name did not resolve.
    #[error("cannot resolve `{host}`: {error}")]
    Resolve {
        /// The host name.
        host: String,
        /// The resolver's error: in the message, not a `source` (the
        /// message would show it twice in a chain).
        error: io::Error,
    },
    /// The socket could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address tried last.
        addr: SocketAddr,
        /// The kernel's error (in the message, not a `source`).
        error: io::Error,
    },
}

impl FromStr for ListenAddress {
    type Err = ListenError;

    fn from_str(given: &str) -> Result<Self, ListenError> {
        let syntax = |why: &str| ListenError::Syntax {
            given: given.to_string(),
            why: why.to_string(),
        };
        let (host, port) = given.rsplit_once(':').ok_or_else(|| syntax("no port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| syntax("the port must be a number from 0 to 65535"))?;
        if host.is_empty() {
            return Ok(Self::Any(port));
        }
        if let Some(inner) = host.strip_prefix('[') {
            let v6 = inner
                .strip_suffix(']')
                .and_then(|a| a.parse::<Ipv6Addr>().ok())
                .ok_or_else(|| syntax("not an IPv6 address between [ and ]"))?;
            return Ok(Self::Socket(SocketAddr::from((v6, port))));
        }
        if host.contains(':') {
            return Err(syntax("an IPv6 address must be written in brackets"));
        }
        if host.contains(['[', ']', '/', ' ']) {
            return Err(syntax("not a host name or address"));
        }
        Ok(match host.parse::<Ipv4Addr>() {
            Ok(v4) => Self::Socket(SocketAddr::from((v4, port))),
            Err(_) => Self::Host(host.to_string(), port),
        })
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any(port) => write!(f, ":{port}"),
            Self::Socket(addr) => write!(f, "{addr}"),
            Self::Host(host, port) => write!(f, "{host}:{port}"),
        }
    }
}

impl ListenAddress {
    /// Binds a listening socket (blocking; callers make it non-blocking).
    pub fn bind(&self) -> Result<TcpListener, ListenError> {
        match self {
            Self::Any(port) => {
                let v6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, *port));
                or_ipv4_when_ipv6_is_off(socket(v6), *port)
            }
            Self::Socket(addr) => socket(*addr),
            Self::Host(host, port) => {
                let addrs = (host.as_str(), *port).to_socket_addrs().map_err(|error| {
                    ListenError::Resolve {
                        host: host.clone(),
                        error,
                    }
                })?;
                let mut last = None;
                for addr in addrs {
                    match socket(addr) {
                        Ok(listener) => return Ok(listener),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| ListenError::Resolve {
                    host: host.clone(),
                    error: io::Error::new(io::ErrorKind::NotFound, "no address"),
                }))
            }
        }
    }
}

/// The dual-stack socket's result, or an IPv4 socket on every address when
/// the kernel has no IPv6 (`ipv6.disable=1`: no AF_INET6 sockets, or no
/// address to bind). Other errors (port taken) are the answer.
fn or_ipv4_when_ipv6_is_off(
    v6: Result<TcpListener, ListenError>,
    port: u16,
) -> Result<TcpListener, ListenError> {
    match v6 {
        Err(ListenError::Bind { error, .. })
            if matches!(
                error.raw_os_error(),
                Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL)
            ) =>
        {
            tracing::debug!("IPv6 is off ({error}): listening on IPv4 only");
            socket(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)))
        }
        other => other,
    }
}

/// A listening TCP socket on `addr`; on `[::]` it takes IPv4 too, whatever
/// `net.ipv6.bindv6only` says.
fn socket(addr: SocketAddr) -> Result<TcpListener, ListenError> {
    let bind = || -> io::Result<TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        if addr.is_ipv6() && addr.ip().is_unspecified() {
            socket.set_only_v6(false)?;
        }
        // As std and Go do: a restarted cgperf rebinds at once.
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())?;
        socket.listen(BACKLOG)?;
        Ok(socket.into())
    };
    bind().map_err(|error| ListenError::Bind { addr, error })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn parse(s: &str) -> Result<ListenAddress, String> {
        s.parse().map_err(|e: ListenError| e.to_string())
    }

    #[test]
    fn accepts_the_forms_node_exporter_accepts() {
        assert_eq!(parse(":9810"), Ok(ListenAddress::Any(9810)));
        assert_eq!(
            parse("0.0.0.0:9810"),
            Ok(ListenAddress::Socket("0.0.0.0:9810".parse().expect("addr")))
        );
        assert_eq!(
            parse("[::1]:9810"),
            Ok(ListenAddress::Socket("[::1]:9810".parse().expect("addr")))
        );
        assert_eq!(
            parse("[::]:0"),
            Ok(ListenAddress::Socket("[::]:0".parse().expect("addr")))
        );
        assert_eq!(
            parse("localhost:9810"),
            Ok(ListenAddress::Host("localhost".into(), 9810))
        );
        for s in [":9810", "127.0.0.1:80", "[::1]:9810", "node-1.example:9810"] {
            assert_eq!(parse(s).map(|a| a.to_string()).as_deref(), Ok(s));
        }
    }

    #[test]
    fn says_what_is_wrong() {
        for (given, says) in [
            ("9810", "no port"),
            ("", "no port"),
            (":", "number from 0 to 65535"),
            (":http", "number from 0 to 65535"),
            (":65536", "number from 0 to 65535"),
            ("::1:9810", "must be written in brackets"),
            ("[::1:9810", "between [ and ]"),
            ("[1.2.3.4]:9810", "between [ and ]"),
            ("a b:9810", "not a host name"),
        ] {
            let e = parse(given).expect_err(given);
            assert!(e.contains(says) && e.contains(":PORT"), "{given}: {e}");
        }
    }

    fn ipv6_works() -> bool {
        std::net::TcpListener::bind("[::1]:0").is_ok()
    }

    fn answers(addr: SocketAddr) -> bool {
        TcpStream::connect(addr).is_ok()
    }

    #[test]
    fn any_address_takes_ipv4_and_ipv6_loopback() {
        let listener = ListenAddress::Any(0).bind().expect("binds");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            for mut c in listener.incoming().flatten() {
                let _ = c.write_all(b"x");
            }
        });
        let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut c = TcpStream::connect(v4).expect("IPv4 connects");
        let mut byte = [0];
        c.read_exact(&mut byte).expect("served");
        let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
        // This machine says whether it has IPv6; with it, `:PORT` must take both.
        assert_eq!(answers(v6), ipv6_works(), "[::1]:{port}");
    }

    #[test]
    fn falls_back_to_ipv4_only_when_ipv6_is_off() {
        let off = Err(ListenError::Bind {
            addr: "[::]:0".parse().expect("addr"),
            error: io::Error::from_raw_os_error(libc::EAFNOSUPPORT),
        });
        let listener = or_ipv4_when_ipv6_is_off(off, 0).expect("IPv4 binds");
        let addr = listener.local_addr().expect("addr");
        assert!(addr.is_ipv4() && addr.ip().is_unspecified(), "{addr}");
        // A port in use is an error, not a reason to fall back.
        let taken = Err(ListenError::Bind {
            addr: "[::]:0".parse().expect("addr"),
            error: io::Error::from_raw_os_error(libc::EADDRINUSE),
        });
        assert!(or_ipv4_when_ipv6_is_off(taken, 0).is_err());
    }

    #[test]
    fn a_port_in_use_is_named() {
        let taken = ListenAddress::Socket("127.0.0.1:0".parse().expect("addr"))
            .bind()
            .expect("binds");
        let port = taken.local_addr().expect("addr").port();
        let e = ListenAddress::Socket(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .bind()
            .expect_err("in use");
        assert!(
            e.to_string()
                .starts_with(&format!("cannot listen on 127.0.0.1:{port}: ")),
            "{e}"
        );
    }

    #[test]
    fn a_host_name_binds_what_it_resolves_to() {
        let listener = ListenAddress::Host("localhost".into(), 0)
            .bind()
            .expect("binds");
        assert!(listener.local_addr().expect("addr").ip().is_loopback());
        let e = ListenAddress::Host("no-such-host.invalid".into(), 0)
            .bind()
            .expect_err("does not resolve");
        assert!(
            e.to_string()
                .starts_with("cannot resolve `no-such-host.invalid`"),
            "{e}"
        );
    }
}
