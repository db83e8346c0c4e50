//! A member's side of DDS clients (see [`crate::client`]): the domain participant's
//! [`spindle_views::group::ClientHandler`]. A client's topics, readers and writers become
//! the member's: the member lists one proxy writer and one proxy reader per topic
//! its clients use ([`crate::sample::PROXY`]; the first costs a view change, the
//! later ones nothing), relays samples to client readers ([`super::relay`]) and
//! sends client samples into the topic's subgroup, stamped with the session's
//! client id (a client cannot write as another).

pub(crate) mod relay;

use crate::access::Action;
use crate::client::MAX_ENDPOINTS;
use crate::engine::Now;
use crate::error::{TopicError, Unavailable, WriteFailure};
use crate::participant::state::{Participant, Shared};
use crate::qos::Level;
use crate::qos::QosError;
use crate::sample::{client_header, CLIENT_HEADER};
use crate::table::TopicTable;
use crate::topic::TopicState;
use crate::wire::client::{decode, Call, LogFailure, Push, Refusal, Reply};
use spindle_sst::sync::lock;
use spindle_tailwind::service::{Lsn, ReadError};
use spindle_views::group::{ClientHandler, ClientSession};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most bytes of history per `History` answer (under the control plane's frame limit).
const HISTORY_PAGE: usize = 2 << 20;
/// How long a client's log read waits for each replica it asks.
const LOG_READ_WAIT: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Endpoints {
    writers: HashMap<u32, (Arc<TopicState>, Level)>,
    readers: HashMap<u32, Arc<TopicState>>,
}

/// See the module docs.
pub(crate) struct Serve {
    shared: Arc<Shared>,
    /// Bytes of history per page: well under a session's buffer, which a page
    /// passes through as one reply.
    page: usize,
    sessions: Mutex<HashMap<u64, Endpoints>>,
}

impl Serve {
    pub(crate) fn new(shared: Arc<Shared>, buffer_bytes: usize) -> Serve {
        Serve { shared, page: (buffer_bytes / 4).clamp(1, HISTORY_PAGE), sessions: Mutex::default() }
    }

    fn participant(&self) -> Result<Arc<Participant>, Refusal> {
        self.shared.participant.get().and_then(|p| p.upgrade()).ok_or(Refusal::Unavailable(Unavailable::Closing))
    }

    fn call(&self, s: &ClientSession, call: Call) -> Result<Reply, Refusal> {
        let p = self.participant()?;
        let entry_of = |name: &str| {
            let view = p.group.view().ok_or(Refusal::Unavailable(Unavailable::Stopped))?;
            let table =
                TopicTable::decode(view.layout().bytes()).map_err(|_| Refusal::Unavailable(Unavailable::Failed))?;
            table.topic(name).cloned().ok_or(Refusal::Topic(TopicError::NoSuchTopic))
        };
        let too_many = Refusal::Qos(QosError::TooManyEndpoints { max: MAX_ENDPOINTS as u32 });
        let may = |topic: &str, action| p.cfg.access.as_ref().map_or(true, |a| a.allows(s.identity(), topic, action));
        let need = |topic: &str, action| if may(topic, action) { Ok(()) } else { Err(Refusal::Denied(action)) };
        let count = |e: &Endpoints| e.writers.len() + e.readers.len();
        match call {
            Call::Topic { name, type_name, qos } => {
                if !may(&name, Action::Publish) {
                    need(&name, Action::Subscribe)?;
                }
                if let Some(qos) = qos {
                    p.create_topic(&name, &type_name, qos).map_err(refusal)?;
                }
                let e = entry_of(&name)?;
                Ok(Reply::Topic { type_name: e.type_name, qos: e.qos })
            }
            Call::Reader { topic, reader, level, from } => {
                need(&topic, Action::Subscribe)?;
                let entry = entry_of(&topic)?;
                if lock(&self.sessions).get(&s.id()).map_or(0, count) >= MAX_ENDPOINTS {
                    return Err(too_many);
                }
                let state = p.proxy(&entry, false).map_err(refusal)?;
                self.wait_for_history(&state)?;
                // Live samples from here on are pushed; the history before is the
                // client's to fetch in pages (`Call::History`), at its pace.
                let start = {
                    let mut g = lock(&state.inner);
                    g.out.attach(s);
                    g.engine.add_client_reader(s.id(), reader, level, from)
                };
                let members = p.group.view().map(|v| v.members().to_vec()).unwrap_or_default();
                let incompatible = entry
                    .writers
                    .iter()
                    .filter(|w| w.id != crate::sample::PROXY && members.iter().any(|m| m.0 == w.node))
                    .filter(|w| !w.level.satisfies(level))
                    .map(|w| (w.node, w.id, w.level))
                    .collect();
                lock(&self.sessions).entry(s.id()).or_default().readers.insert(reader, state);
                Ok(Reply::Reader { lost: start.lost, incompatible, history: start.history })
            }
            Call::Writer { topic, writer, level } => {
                need(&topic, Action::Publish)?;
                let entry = entry_of(&topic)?;
                if level > entry.qos.level {
                    return Err(Refusal::Qos(QosError::AboveTopic { offered: level, topic: entry.qos.level }));
                }
                if lock(&self.sessions).get(&s.id()).map_or(0, count) >= MAX_ENDPOINTS {
                    return Err(too_many);
                }
                let state = p.proxy(&entry, true).map_err(refusal)?;
                // Readers whose request this writer's offer does not meet: members'
                // (of the table) and this member's clients'.
                let members = p.group.view().map(|v| v.members().to_vec()).unwrap_or_default();
                let mut incompatible: Vec<(u32, u32, Option<u64>, Level)> = entry
                    .readers
                    .iter()
                    .filter(|r| r.id != crate::sample::PROXY && members.iter().any(|m| m.0 == r.node))
                    .filter(|r| !level.satisfies(r.level))
                    .map(|r| (r.node, r.id, None, r.level))
                    .collect();
                let mut g = lock(&state.inner);
                g.out.attach(s);
                g.engine.add_client_writer(s.id(), writer, level);
                let me = self.shared.me().0;
                let above = g.engine.client_readers_above(level);
                drop(g);
                incompatible.extend(above.into_iter().map(|(c, r, l)| (me, r, Some(c), l)));
                lock(&self.sessions).entry(s.id()).or_default().writers.insert(writer, (state, level));
                Ok(Reply::Writer { incompatible })
            }
            Call::History { topic, reader, from, to } => {
                let state = lock(&self.sessions)
                    .get(&s.id())
                    .and_then(|e| e.readers.get(&reader).cloned())
                    .filter(|t| t.name == topic)
                    .ok_or(Refusal::NoSuchEndpoint)?;
                let page = lock(&state.inner).engine.client_history(s.id(), reader, (from, to), self.page, Now::real());
                let page = page.ok_or(Refusal::NoSuchEndpoint)?;
                let entries = page
                    .entries
                    .into_iter()
                    .map(|e| (e.seq, e.view.0, e.node, serde_bytes::ByteBuf::from(e.bytes)))
                    .collect();
                Ok(Reply::History { entries, next: page.next, lost: page.lost })
            }
            Call::Close { writer, id } => {
                let mut sessions = lock(&self.sessions);
                let e = sessions.entry(s.id()).or_default();
                if writer {
                    if let Some((state, _)) = e.writers.remove(&id) {
                        lock(&state.inner).engine.remove_client_writer(s.id(), id);
                    }
                } else if let Some(state) = e.readers.remove(&id) {
                    lock(&state.inner).engine.remove_client_reader(s.id(), id);
                }
                Ok(Reply::Done)
            }
            Call::Matched { topic } => {
                let m = crate::DomainParticipant(p).matched(&topic).ok_or(Refusal::Topic(TopicError::NoSuchTopic))?;
                Ok(Reply::Matched {
                    writers: m.writers,
                    readers: m.readers,
                    client_writers: m.client_writers,
                    client_readers: m.client_readers,
                })
            }
            Call::Write { .. } => Err(Refusal::Malformed),
            Call::LogRead { log, .. } if !may(&log, Action::Subscribe) => Ok(Reply::LogFailed(LogFailure::Denied)),
            Call::LogRead { log, from, max } => Ok(self.log_read(&p, &log, from, max)),
            Call::Domain => {
                let view = p.group.view().ok_or(Refusal::Unavailable(Unavailable::Stopped))?;
                Ok(Reply::Domain {
                    view: view.id().0,
                    members: view.members().iter().map(|m| m.0).collect(),
                    table: serde_bytes::ByteBuf::from(view.layout().bytes().to_vec()),
                })
            }
        }
    }

    /// A page of log `log`'s committed records for a client (from this member's
    /// copy, or from a replica).
    fn log_read(&self, p: &Arc<Participant>, log: &str, from: u64, max: u32) -> Reply {
        let unavailable = |why| Reply::LogFailed(LogFailure::Unavailable(why));
        let Some(view) = p.group.view() else { return unavailable(Unavailable::Stopped) };
        let handle = match p.log_handle(log, &view) {
            Ok(h) => h,
            Err(crate::DdsError::Topic { .. }) => return Reply::LogFailed(LogFailure::NoSuchLog),
            Err(_) => return unavailable(Unavailable::LogNotStarted),
        };
        match handle.read_page(Lsn(from), (max as usize).min(self.page), LOG_READ_WAIT) {
            Ok(r) => Reply::LogRecords(r.into_iter().map(|(l, b)| (l.0, serde_bytes::ByteBuf::from(b))).collect()),
            Err(ReadError::Gap(l)) => Reply::LogFailed(LogFailure::Gap(l.0)),
            Err(e @ (ReadError::Damaged { .. } | ReadError::Segment(_) | ReadError::Count { .. })) => {
                tracing::error!(%log, %e, "a client's log read found damage");
                Reply::LogFailed(LogFailure::Damaged)
            }
            Err(e) => {
                tracing::debug!(%log, %e, "a client's log read cannot be served now");
                unavailable(Unavailable::LogNotReady)
            }
        }
    }

    /// Waits (up to the catch-up timeout) until this member has the topic's
    /// history, which a client reader's start or resume is served from.
    fn wait_for_history(&self, state: &TopicState) -> Result<(), Refusal> {
        let deadline = Instant::now() + self.shared.catch_up_timeout;
        let mut g = lock(&state.inner);
        while g.engine.catching_up() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Refusal::Unavailable(Unavailable::CatchingUp));
            }
            g = state.entered.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0;
        }
        Ok(())
    }

    /// Sends a client's sample into its topic's subgroup.
    ///
    /// A sample this member cannot send now, though another member could (it is
    /// stopping, out of the majority, between views), ends the session instead of
    /// failing the sample: the client moves and sends everything unacknowledged
    /// again, in order. Failing it would lose it for good, because members drop a
    /// client sample numbered below one they delivered, and the writer's next
    /// samples may still be delivered through this member or the next. For the
    /// same reason nothing posted after the session ended is sent.
    fn write(&self, s: &ClientSession, writer: u32, seq: u64, ts: u64, payload: &[u8]) {
        if !s.is_open() {
            return;
        }
        let Some((state, level)) = lock(&self.sessions).get(&s.id()).and_then(|e| e.writers.get(&writer).cloned())
        else {
            s.close(&format!("a write for writer {writer}, which this client did not register here"));
            return;
        };
        let fail = |why: WriteFailure| {
            s.push(&Push::Failed { writer, seq, why }.encode());
        };
        let max = state.qos.max_sample_bytes as usize;
        if payload.len() > max {
            return fail(WriteFailure::TooLarge { len: payload.len(), max });
        }
        let Ok(p) = self.participant() else { return s.close("the member stops") };
        let h = client_header(s.id(), writer, level as u8, seq, ts);
        let sent = p.group.send_where(
            |v| state.subgroup_in(v),
            CLIENT_HEADER + payload.len(),
            |slot| {
                for (i, w) in h.iter().enumerate() {
                    slot.write_word(i, *w);
                }
                slot.write(CLIENT_HEADER, payload);
            },
        );
        match sent {
            Ok(_) => {}
            Err(spindle_views::group::SendError::Timeout(_)) => fail(WriteFailure::NoRoom),
            Err(spindle_views::group::SendError::TooLarge { len, max }) => fail(WriteFailure::TooLarge { len, max }),
            Err(e) => {
                tracing::debug!(%e, client = s.id(), writer, "a client's sample not sent here: the client moves");
                s.close("this member cannot send now: move to another");
            }
        }
    }
}

impl ClientHandler for Serve {
    fn request(&self, s: &ClientSession, body: &[u8]) -> Vec<u8> {
        let reply = match decode::<Call>(body).and_then(|c| c.check().map(|()| c)) {
            Ok(call) => self.call(s, call).unwrap_or_else(Reply::Refused),
            Err(_) => Reply::Refused(Refusal::Malformed),
        };
        reply.encode()
    }

    fn post(&self, s: &ClientSession, body: &[u8]) {
        match decode::<Call>(body) {
            Ok(Call::Write { writer, seq, ts, payload }) => self.write(s, writer, seq, ts, &payload),
            Ok(_) => s.close("only writes are posted"),
            Err(e) => s.close(&format!("bad post: {e}")),
        }
    }

    fn closed(&self, s: &ClientSession) {
        let Some(e) = lock(&self.sessions).remove(&s.id()) else { return };
        let topics = e.readers.into_values().chain(e.writers.into_values().map(|(t, _)| t));
        for t in topics {
            let mut g = lock(&t.inner);
            g.engine.forget_client(s.id());
            g.out.detach(s.id());
        }
    }
}

/// What a client hears of a member's failure to do its call.
fn refusal(e: crate::DdsError) -> Refusal {
    use crate::DdsError as E;
    match e {
        E::Topic { why, .. } => Refusal::Topic(why),
        E::Qos(q) => Refusal::Qos(q),
        E::Unavailable(u) => Refusal::Unavailable(u),
        E::Stopped(_) => Refusal::Unavailable(Unavailable::Stopped),
        E::TimedOut { .. } => Refusal::Unavailable(Unavailable::Busy),
        other => {
            tracing::warn!(%other, "a client's call failed at this member");
            Refusal::Unavailable(Unavailable::Failed)
        }
    }
}
