//! A proxy in front of one etcd member, for replies lost, requests held
//! in flight and a member gone away.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Forwards one HTTP request per connection to `upstream` ; `lose_next` loses the reply to the next
/// request whose body contains `marker`, `down` closes the listening port
/// for good (a member that went away: connections are refused).
pub struct Proxy {
    pub port: u16,
    pub lose_next: Arc<AtomicBool>,
    pub down: Arc<AtomicBool>,
    /// Holds requests whose body contains `marker` this long before
    /// forwarding them (a request in flight), while set (ms).
    pub delay_ms: Arc<AtomicUsize>,
}

impl Proxy {
    pub fn start(upstream: u16, marker: &'static str) -> Proxy {
        Proxy::start_marking(upstream, Arc::new(std::sync::Mutex::new(marker.to_owned())))
    }

    /// [`Proxy::start`] with a marker the test may change as it goes.
    pub fn start_marking(upstream: u16, marker: Arc<std::sync::Mutex<String>>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let lose_next = Arc::new(AtomicBool::new(false));
        let down = Arc::new(AtomicBool::new(false));
        let delay_ms = Arc::new(AtomicUsize::new(0));
        let (lose, is_down, delay) = (lose_next.clone(), down.clone(), delay_ms.clone());
        std::thread::spawn(move || loop {
            if is_down.load(Ordering::SeqCst) {
                drop(listener);
                return;
            }
            let client = match listener.accept() {
                Ok((client, _)) => client,
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
            };
            client.set_nonblocking(false).unwrap();
            let (lose, delay) = (lose.clone(), delay.clone());
            let marker = marker.lock().unwrap().clone();
            std::thread::spawn(move || forward(client, upstream, &marker, &lose, &delay));
        });
        Proxy {
            port,
            lose_next,
            down,
            delay_ms,
        }
    }
}

fn forward(
    mut client: TcpStream,
    upstream: u16,
    marker: &str,
    lose: &AtomicBool,
    delay: &AtomicUsize,
) {
    let Some(request) = read_request(&mut client) else {
        return;
    };
    let marked = contains(&request, marker);
    let hold = delay.load(Ordering::SeqCst);
    if hold > 0 && marked {
        std::thread::sleep(Duration::from_millis(hold as u64));
    }
    let Some(response) = send(upstream, &request) else {
        return;
    };
    if marked && lose.swap(false, Ordering::SeqCst) {
        let _ = client.shutdown(std::net::Shutdown::Both);
        return;
    }
    let _ = client.write_all(&response);
    let _ = client.shutdown(std::net::Shutdown::Both);
}

/// A member that fails mid-way: the first request containing `marker` has
/// its connection closed as soon as it is read (the client sees no answer
/// and sends it again elsewhere), and is handed to the member `delay` later
/// all the same. Every other request is forwarded.
pub struct LateMember {
    pub port: u16,
}

impl LateMember {
    pub fn start(upstream: u16, marker: &'static str, delay: Duration) -> LateMember {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(true));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(mut client) = client else { return };
                let armed = armed.clone();
                std::thread::spawn(move || {
                    let Some(request) = read_request(&mut client) else {
                        return;
                    };
                    let late = contains(&request, marker) && armed.swap(false, Ordering::SeqCst);
                    if late {
                        let _ = client.shutdown(std::net::Shutdown::Both);
                        std::thread::sleep(delay);
                    }
                    let Some(response) = send(upstream, &request) else {
                        return;
                    };
                    if !late {
                        let _ = client.write_all(&response);
                        let _ = client.shutdown(std::net::Shutdown::Both);
                    }
                });
            }
        });
        LateMember { port }
    }
}

/// What [`RuleProxy`] does with a request whose text contains a rule's marker.
#[derive(Clone, Copy, Debug)]
pub enum Act {
    /// Closes the connection without forwarding it (a reply never comes;
    /// the request never reached etcd).
    Refuse,
    /// Forwards it, then closes the connection without the reply.
    LoseReply,
    /// Forwards it at once; hands the reply back this much later.
    HoldReply(Duration),
    /// Holds it this long before forwarding it; the reply follows as usual.
    HoldRequest(Duration),
}

struct Rule {
    marker: String,
    act: Act,
    /// How many more requests it applies to (None: every one).
    times: Option<usize>,
}

/// A proxy in front of one etcd member that applies the first rule whose
/// marker a request contains (head or body), one HTTP request per
/// connection. Rules can be added as the test goes.
pub struct RuleProxy {
    pub port: u16,
    rules: Arc<Mutex<Vec<Rule>>>,
    down: Arc<AtomicBool>,
}

impl RuleProxy {
    pub fn start(upstream: u16) -> RuleProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::new(Mutex::new(Vec::new()));
        let down = Arc::new(AtomicBool::new(false));
        let (rules2, down2) = (rules.clone(), down.clone());
        std::thread::spawn(move || loop {
            if down2.load(Ordering::SeqCst) {
                return;
            }
            let client = match listener.accept() {
                Ok((client, _)) => client,
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
            };
            client.set_nonblocking(false).unwrap();
            let rules = rules2.clone();
            std::thread::spawn(move || apply_rules(client, upstream, &rules));
        });
        RuleProxy { port, rules, down }
    }

    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    pub fn rule(&self, marker: &str, act: Act, times: Option<usize>) {
        self.rules.lock().unwrap().push(Rule {
            marker: marker.to_owned(),
            act,
            times,
        });
    }

    /// How many uses the rule with `marker` has left (None: unlimited or gone).
    pub fn left(&self, marker: &str) -> Option<usize> {
        self.rules
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.marker == marker)
            .and_then(|r| r.times)
    }
}

impl Drop for RuleProxy {
    fn drop(&mut self) {
        self.down.store(true, Ordering::SeqCst);
    }
}

/// Forwards one request, doing what the first rule it matches says.
fn apply_rules(mut client: TcpStream, upstream: u16, rules: &Mutex<Vec<Rule>>) {
    let Some(request) = read_request(&mut client) else {
        return;
    };
    let act = {
        let mut rules = rules.lock().unwrap();
        rules
            .iter_mut()
            .filter(|r| r.times != Some(0))
            .find(|r| contains(&request, &r.marker))
            .map(|r| {
                if let Some(n) = &mut r.times {
                    *n -= 1;
                }
                r.act
            })
    };
    match act {
        Some(Act::Refuse) => {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        Some(Act::HoldRequest(hold)) => std::thread::sleep(hold),
        _ => {}
    }
    let Some(response) = send(upstream, &request) else {
        return;
    };
    match act {
        Some(Act::LoseReply) => {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        Some(Act::HoldReply(hold)) => std::thread::sleep(hold),
        _ => {}
    }
    let _ = client.write_all(&response);
    let _ = client.shutdown(Shutdown::Both);
}

fn contains(request: &[u8], marker: &str) -> bool {
    request
        .windows(marker.len())
        .any(|w| w == marker.as_bytes())
}

/// Sends `request` to the member and reads its whole answer.
fn send(upstream: u16, request: &[u8]) -> Option<Vec<u8>> {
    let mut up = TcpStream::connect(("127.0.0.1", upstream)).ok()?;
    up.write_all(request).ok()?;
    let mut response = Vec::new();
    let _ = up.read_to_end(&mut response);
    Some(response)
}

/// One HTTP request, its head rewritten to close the upstream connection.
fn read_request(client: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let mut request = head.as_bytes()[..head.len() - 2].to_vec();
    request.extend_from_slice(b"connection: close\r\n\r\n");
    request.extend_from_slice(&buf[head_end..]);
    Some(request)
}
