//! Live feeds: a publisher (the store, for a subscribed scope's delta
//! samples) publishes each item once, and each subscriber reads all of
//! them in order, or learns how many it lost when it fell more than
//! [`FEED_CAPACITY`] behind. Nothing blocks: a subscriber registers a
//! [`Doorbell`] that a publish rings, and reads with
//! [`FeedReceiver::try_recv`] from its own thread.
//!
//! Items are shared (`Arc<T>`): a publish copies no item, whatever the
//! number of subscribers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::worker::Doorbell;

/// Items a feed keeps for its slowest subscriber; one that lags further
/// loses the oldest (and is told how many).
pub const FEED_CAPACITY: usize = 1024;

#[derive(Debug)]
struct FeedState<T> {
    samples: VecDeque<Arc<T>>,
    /// Position of `samples[0]` in the feed since it began.
    first: u64,
    /// The publisher is gone: subscribers end after what is left.
    closed: bool,
    /// Live subscribers (a feed without any is dropped by the store).
    receivers: usize,
    /// Rung on every publish and on the close, one per subscriber that
    /// asked (the same bell may be here more than once).
    bells: Vec<(u64, Arc<Doorbell>)>,
    next_receiver: u64,
}

impl<T> Default for FeedState<T> {
    fn default() -> Self {
        FeedState {
            samples: VecDeque::new(),
            first: 0,
            closed: false,
            receivers: 0,
            bells: Vec::new(),
            next_receiver: 0,
        }
    }
}

#[derive(Debug)]
struct Shared<T> {
    state: Mutex<FeedState<T>>,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, FeedState<T>> {
        // Every update leaves the state consistent; a panic elsewhere
        // must not stop the other subscribers.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The publishing end of a feed, kept by the store; dropping it ends the
/// feed.
#[derive(Debug)]
pub struct Feed<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Default for Feed<T> {
    fn default() -> Self {
        Feed {
            shared: Arc::new(Shared {
                state: Mutex::new(FeedState::default()),
            }),
        }
    }
}

/// One subscriber's place in a feed.
#[derive(Debug)]
pub struct FeedReceiver<T> {
    shared: Arc<Shared<T>>,
    id: u64,
    /// Position of the next sample to read.
    next: u64,
}

/// What [`FeedReceiver::try_recv`] found.
#[derive(Debug)]
pub enum Received<T> {
    /// The next item.
    Item(Arc<T>),
    /// This many samples were overwritten before they were read; the next
    /// call reads the oldest one kept.
    Lagged(u64),
    /// Nothing new yet.
    Empty,
    /// The feed ended and everything was read.
    Closed,
}

impl<T> Feed<T> {
    /// Publishes `sample` to every subscriber; false when there is none
    /// left (the store then drops the feed).
    pub fn publish(&self, item: Arc<T>) -> bool {
        let mut s = self.shared.lock();
        if s.receivers == 0 {
            return false;
        }
        s.samples.push_back(item);
        if s.samples.len() > FEED_CAPACITY {
            s.samples.pop_front();
            s.first += 1;
        }
        ring_all(&s);
        true
    }

    /// Live subscribers.
    pub fn receiver_count(&self) -> usize {
        self.shared.lock().receivers
    }

    /// A new subscriber, reading from the next publish on.
    pub fn subscribe(&self) -> FeedReceiver<T> {
        let mut s = self.shared.lock();
        s.receivers += 1;
        let id = s.next_receiver;
        s.next_receiver += 1;
        FeedReceiver {
            shared: Arc::clone(&self.shared),
            id,
            next: s.first + s.samples.len() as u64,
        }
    }
}

fn ring_all<T>(s: &FeedState<T>) {
    for (_, bell) in &s.bells {
        bell.ring();
    }
}

impl<T> Drop for Feed<T> {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.closed = true;
        ring_all(&s);
    }
}

impl<T> FeedReceiver<T> {
    /// The next sample, a lag, or why there is none.
    pub fn try_recv(&mut self) -> Received<T> {
        let mut s = self.shared.lock();
        if self.next < s.first {
            let lost = s.first - self.next;
            self.next = s.first;
            return Received::Lagged(lost);
        }
        let at = usize::try_from(self.next - s.first).unwrap_or(usize::MAX);
        if let Some(sample) = s.samples.get(at) {
            let sample = Arc::clone(sample);
            self.next += 1;
            // Samples every subscriber has read are released at once.
            let min_next = self.next;
            trim_read(&mut s, min_next);
            return Received::Item(sample);
        }
        if s.closed {
            Received::Closed
        } else {
            Received::Empty
        }
    }

    /// Rings `bell` on every publish to this feed and on its end, for as
    /// long as this subscriber lives.
    pub fn ring_on_publish(&self, bell: Arc<Doorbell>) {
        self.shared.lock().bells.push((self.id, bell));
    }
}

/// With one subscriber, what it read is dropped; with more, the capacity
/// bounds the feed (each subscriber's position is its own).
fn trim_read<T>(s: &mut FeedState<T>, reader_next: u64) {
    if s.receivers != 1 {
        return;
    }
    while s.first < reader_next && s.samples.pop_front().is_some() {
        s.first += 1;
    }
}

impl<T> Drop for FeedReceiver<T> {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.receivers -= 1;
        s.bells.retain(|(id, _)| *id != self.id);
        if s.receivers == 0 {
            let end = s.first + s.samples.len() as u64;
            s.samples.clear();
            s.first = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::Woken;

    fn sample(seq: u64) -> Arc<u64> {
        Arc::new(seq)
    }

    fn seq(r: Received<u64>) -> u64 {
        match r {
            Received::Item(s) => *s,
            other => panic!("expected an item, got {other:?}"),
        }
    }

    #[test]
    fn every_subscriber_reads_every_sample_published_after_it_subscribed() {
        let feed = Feed::<u64>::default();
        assert!(!feed.publish(sample(0)), "no subscriber yet");
        let mut a = feed.subscribe();
        assert!(feed.publish(sample(1)));
        let mut b = feed.subscribe();
        assert!(feed.publish(sample(2)));
        assert_eq!((seq(a.try_recv()), seq(a.try_recv())), (1, 2));
        assert!(matches!(a.try_recv(), Received::Empty));
        assert_eq!(seq(b.try_recv()), 2);
        drop(feed);
        assert!(matches!(a.try_recv(), Received::Closed));
        assert!(matches!(b.try_recv(), Received::Closed));
    }

    #[test]
    fn a_lagging_subscriber_learns_exactly_how_many_it_lost() {
        let feed = Feed::<u64>::default();
        let mut slow = feed.subscribe();
        let mut fast = feed.subscribe();
        let extra = 5;
        for i in 0..FEED_CAPACITY as u64 + extra {
            feed.publish(sample(i));
            assert_eq!(seq(fast.try_recv()), i);
        }
        assert!(matches!(slow.try_recv(), Received::Lagged(n) if n == extra));
        assert_eq!(seq(slow.try_recv()), extra);
    }

    #[test]
    fn a_single_subscriber_holds_only_what_it_has_not_read() {
        let feed = Feed::<u64>::default();
        let mut r = feed.subscribe();
        for i in 0..3 {
            feed.publish(sample(i));
            assert_eq!(seq(r.try_recv()), i);
            assert!(feed.shared.lock().samples.is_empty());
        }
        drop(r);
        assert!(!feed.publish(sample(9)), "the last subscriber left");
    }

    #[test]
    fn a_publish_and_the_end_ring_the_subscribers_bell_until_it_leaves() {
        let feed = Feed::<u64>::default();
        let bell = Doorbell::new();
        let r = feed.subscribe();
        r.ring_on_publish(Arc::clone(&bell));
        let g = bell.generation();
        feed.publish(sample(1));
        assert_eq!(bell.wait(g, None), Woken::Rung(g + 1));
        drop(r);
        let _keep = feed.subscribe();
        feed.publish(sample(2));
        assert_eq!(
            bell.generation(),
            g + 1,
            "a gone subscriber's bell is not rung"
        );
    }
}
