//! The connection cap, with eviction of idle connections.
//!
//! At most `max` connections are served at once. A connection is *idle*
//! while it has no request in progress: from accept (including the TLS
//! handshake) until its request head is complete, and again between
//! keep-alive requests. When all slots are taken, a new connection takes
//! the slot of the **oldest idle** one, which is closed. So idle or
//! half-sent connections, however many, cannot keep a real scrape out: it
//! evicts one of them. Connections with a request in progress are evicted
//! only once that request is older than the stale limit (a client that
//! stopped reading its response); while every slot holds a younger one,
//! new connections wait in the kernel's accept queue.
//!
//! Idle connections that are never evicted still end: hyper closes one
//! that has not sent a complete request head within the header read
//! timeout, and the TLS handshake has its own timeout.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, oneshot};

/// How often a full table is re-examined for requests turned stale.
const RECHECK: Duration = Duration::from_secs(1);

/// The slot table.
pub(super) struct Slots {
    max: usize,
    /// A request in progress for this long no longer protects its slot.
    stale_after: Duration,
    table: Mutex<Table>,
    /// Signalled when a slot frees or a connection goes idle.
    changed: Notify,
}

struct Table {
    next_id: u64,
    /// By id, which grows with accept order: the first idle one is the
    /// oldest.
    conns: BTreeMap<u64, Conn>,
}

struct Conn {
    /// When the request in progress started; `None` while idle.
    busy_since: Option<Instant>,
    evict: oneshot::Sender<()>,
}

/// A connection's slot, freed when dropped.
pub(super) struct Ticket {
    slots: Arc<Slots>,
    id: u64,
}

/// Resolves when another connection took the slot: close the connection.
pub(super) type Evicted = oneshot::Receiver<()>;

/// Marks a connection busy while alive.
pub(super) struct Busy {
    slots: Arc<Slots>,
    id: u64,
}

impl Slots {
    pub fn new(max: usize, stale_after: Duration) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            stale_after,
            table: Mutex::new(Table {
                next_id: 0,
                conns: BTreeMap::new(),
            }),
            changed: Notify::new(),
        })
    }

    /// A slot for a new connection, evicting an idle (or stale) one if all
    /// are taken, or waiting until one can be had.
    pub async fn admit(self: &Arc<Self>) -> (Ticket, Evicted) {
        loop {
            if let Some(ticket) = self.try_admit(Instant::now()) {
                return ticket;
            }
            // `Notify` keeps a permit when nobody waits: no wake-up is lost
            // between the attempt above and this wait.
            let _ = tokio::time::timeout(RECHECK, self.changed.notified()).await;
        }
    }

    /// Closes the oldest idle (or stale) connection, if there is one, to
    /// free its descriptor: what `accept` failing for want of descriptors
    /// (`EMFILE`) needs before a scrape can be let in.
    pub fn evict_one(&self) -> bool {
        let mut table = self.lock();
        let evicted = self.evict(&mut table, Instant::now());
        if evicted {
            tracing::debug!("out of file descriptors: closed the oldest idle connection");
        }
        evicted
    }

    /// Removes the oldest idle connection, else the oldest whose request
    /// is stale, and tells it to close; false when there is none.
    fn evict(&self, table: &mut Table, now: Instant) -> bool {
        let victim = table
            .conns
            .iter()
            .find(|(_, c)| c.busy_since.is_none())
            .or_else(|| {
                table.conns.iter().find(|(_, c)| {
                    c.busy_since
                        .is_some_and(|t| now.duration_since(t) >= self.stale_after)
                })
            })
            .map(|(id, _)| *id);
        let Some(conn) = victim.and_then(|id| table.conns.remove(&id)) else {
            return false;
        };
        let _ = conn.evict.send(());
        true
    }

    fn try_admit(self: &Arc<Self>, now: Instant) -> Option<(Ticket, Evicted)> {
        let mut table = self.lock();
        if table.conns.len() >= self.max {
            if !self.evict(&mut table, now) {
                return None;
            }
            tracing::debug!("{} connections open: closed the oldest idle one", self.max);
        }
        let id = table.next_id;
        table.next_id += 1;
        let (evict, evicted) = oneshot::channel();
        table.conns.insert(
            id,
            Conn {
                busy_since: None,
                evict,
            },
        );
        Some((
            Ticket {
                slots: self.clone(),
                id,
            },
            evicted,
        ))
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_busy(&self, id: u64, since: Option<Instant>) {
        if let Some(conn) = self.lock().conns.get_mut(&id) {
            conn.busy_since = since;
        }
        if since.is_none() {
            self.changed.notify_one();
        }
    }
}

impl Ticket {
    /// Marks the connection busy until the returned guard is dropped: hold
    /// it until the response has been written.
    pub fn busy(&self) -> Busy {
        self.slots.set_busy(self.id, Some(Instant::now()));
        Busy {
            slots: self.slots.clone(),
            id: self.id,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.slots.lock().conns.remove(&self.id);
        self.slots.changed.notify_one();
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.slots.set_busy(self.id, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evicted((_, evicted): &mut (Ticket, Evicted)) -> bool {
        evicted.try_recv().is_ok()
    }

    #[tokio::test]
    async fn a_full_table_evicts_the_oldest_idle_connection() {
        let slots = Slots::new(3, Duration::from_secs(60));
        let mut a = slots.admit().await;
        let mut b = slots.admit().await;
        let mut c = slots.admit().await;
        let busy_a = a.0.busy();
        let mut d = slots.admit().await;
        assert!(!evicted(&mut a), "busy connections keep their slot");
        assert!(evicted(&mut b), "the oldest idle one goes");
        assert!(!evicted(&mut c));
        drop(busy_a);
        let _e = slots.admit().await;
        assert!(evicted(&mut a), "idle again, and now the oldest");
        assert!(!evicted(&mut c) && !evicted(&mut d));
    }

    #[tokio::test]
    async fn waits_while_every_slot_is_busy() {
        let slots = Slots::new(1, Duration::from_secs(60));
        let a = slots.admit().await;
        let busy = a.0.busy();
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.admit().await.0.id }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "no slot while the request runs");
        drop(busy);
        drop(a);
        let id = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("admitted once the slot frees")
            .expect("task");
        assert_eq!(id, 1);
    }

    #[tokio::test]
    async fn stale_requests_lose_their_slot() {
        let slots = Slots::new(1, Duration::ZERO);
        let mut a = slots.admit().await;
        let _busy = a.0.busy();
        let _b = slots.admit().await;
        assert!(evicted(&mut a));
    }

    #[tokio::test]
    async fn dropped_tickets_free_their_slot() {
        let slots = Slots::new(2, Duration::from_secs(60));
        let mut a = slots.admit().await;
        let b = slots.admit().await;
        drop(b);
        let _c = slots.admit().await;
        assert!(!evicted(&mut a), "a freed slot is used before evicting");
    }
}
