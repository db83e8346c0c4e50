//! The topic table: the domain's layout document (a replicated, versioned part of
//! every view; see `spindle_views::layout`) and the layout it defines.
//!
//! The table lists the participants (node id and incarnation) and the topics, each
//! with its type, its QoS and its endpoints (writers and readers, by node). Topic `t`
//! has a subgroup in a view when a member of the view writes it; the subgroup's
//! members are the view's members with an endpoint on `t`, in rank order, and its
//! senders are those with a writer. Subgroups are numbered by topic order, skipping
//! topics without one, so a subgroup's index may differ between views: everything
//! maps by topic name ([`Layout::successor`]).
//!
//! Edits are postcard-encoded [`Edit`]s and idempotent: one that the table already
//! reflects is `Ok(None)`. They come from peers' rows, so each is decoded and checked
//! ([`spindle_views::layout::EditError::Invalid`] otherwise).

use crate::error::TopicError;
use crate::qos::{Level, Qos};
use crate::wire::WireError;
use serde::{Deserialize, Serialize};
use spindle_smc::{Mode, SubgroupSpec};
use spindle_sst::transport::NodeId;
use spindle_views::layout::{EditError, Layout, LayoutError};
use spindle_views::view::View;

/// The longest topic name.
pub const MAX_NAME: usize = 128;
/// The longest type name.
pub const MAX_TYPE_NAME: usize = 256;

/// A writer or reader, as the table lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Its participant's node.
    pub node: u32,
    /// Its number in that participant.
    pub id: u32,
    /// The level it offers (writer) or requests (reader).
    pub level: Level,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicEntry {
    /// Its name.
    pub name: String,
    /// Its sample type (the codec and the Rust type name).
    pub type_name: String,
    /// Its QoS, as the participant that created it gave it.
    pub qos: Qos,
    /// Writers.
    pub writers: Vec<Endpoint>,
    /// Readers.
    pub readers: Vec<Endpoint>,
}

impl Endpoint {
    /// True for the endpoint a member lists for the clients it serves (their
    /// writers' samples go out under it; its reader takes every sample for them).
    pub fn is_proxy(&self) -> bool {
        self.id == crate::sample::PROXY
    }
}

impl TopicEntry {
    fn has(&self, node: u32) -> bool {
        self.writers.iter().chain(&self.readers).any(|e| e.node == node)
    }

    /// The subgroup of this topic in `view`, if a member writes it.
    pub(crate) fn spec(&self, view: &View) -> Option<SubgroupSpec> {
        let members: Vec<NodeId> = view.members().iter().copied().filter(|n| self.has(n.0)).collect();
        let senders: Vec<NodeId> =
            members.iter().copied().filter(|n| self.writers.iter().any(|w| w.node == n.0)).collect();
        if senders.is_empty() {
            return None;
        }
        Some(SubgroupSpec {
            members,
            senders,
            window: self.qos.ring_window(),
            max_msg: self.qos.max_msg(),
            arena: self.qos.arena(),
            mode: if self.qos.level == Level::Unordered { Mode::Unordered } else { Mode::Ordered },
            relay: false,
        })
    }
}

/// The whole table.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TopicTable {
    /// Participants: node and incarnation (a restarted process has a new one).
    pub participants: Vec<(u32, u64)>,
    /// Topics in creation order.
    pub topics: Vec<TopicEntry>,
    /// Replicated logs (Tailwind) in creation order (see [`crate::logs`]).
    pub logs: Vec<crate::logs::entry::LogEntry>,
}

/// A change to the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Edit {
    /// A participant starts: endpoints of an earlier incarnation of its node go.
    Hello {
        /// Node.
        node: u32,
        /// Incarnation (random per process).
        incarnation: u64,
    },
    /// Creates a topic, or checks that it exists with this type and QoS.
    CreateTopic {
        /// Name.
        name: String,
        /// Type name.
        type_name: String,
        /// QoS.
        qos: Qos,
    },
    /// Adds a writer or reader.
    AddEndpoint {
        /// Topic.
        topic: String,
        /// The participant's incarnation (an edit of a dead one is refused).
        incarnation: u64,
        /// True for a writer.
        writer: bool,
        /// The endpoint.
        endpoint: Endpoint,
    },
    /// Removes a writer or reader.
    RemoveEndpoint {
        /// Topic.
        topic: String,
        /// True for a writer.
        writer: bool,
        /// Node.
        node: u32,
        /// Its number.
        id: u32,
    },
    /// Creates a replicated log, or checks that it exists with this QoS.
    CreateLog {
        /// Name.
        name: String,
        /// QoS.
        qos: crate::qos::LogQos,
    },
}

impl Edit {
    /// Encodes the edit.
    pub(crate) fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("an edit always encodes")
    }
}

impl TopicTable {
    /// Decodes a layout document (the empty document is the empty table).
    pub(crate) fn decode(doc: &[u8]) -> Result<TopicTable, WireError> {
        if doc.is_empty() {
            return Ok(TopicTable::default());
        }
        match postcard::take_from_bytes::<TopicTable>(doc) {
            Ok((t, [])) => Ok(t),
            Ok((_, rest)) => Err(WireError::Trailing(rest.len())),
            Err(_) => Err(WireError::Malformed),
        }
    }

    /// Encodes the table.
    pub(crate) fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("a table always encodes")
    }

    /// The topic named `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicEntry> {
        self.topics.iter().find(|t| t.name == name)
    }

    /// The subgroups of `view`, with the topic index of each.
    pub(crate) fn subgroups(&self, view: &View) -> Vec<(usize, SubgroupSpec)> {
        self.topics.iter().enumerate().filter_map(|(i, t)| t.spec(view).map(|s| (i, s))).collect()
    }

    /// The subgroup index of topic `name` in `view`.
    pub(crate) fn subgroup_of(&self, name: &str, view: &View) -> Option<usize> {
        self.subgroups(view).iter().position(|(i, _)| self.topics[*i].name == name)
    }

    /// Applies `edit`: `Ok(None)` if the table already reflects it.
    pub(crate) fn apply(&self, edit: &Edit) -> Result<Option<TopicTable>, TopicError> {
        let mut t = self.clone();
        match edit {
            Edit::Hello { node, incarnation } => {
                if t.participants.contains(&(*node, *incarnation)) {
                    return Ok(None);
                }
                t.participants.retain(|(n, _)| n != node);
                t.participants.push((*node, *incarnation));
                for topic in &mut t.topics {
                    topic.writers.retain(|e| e.node != *node);
                    topic.readers.retain(|e| e.node != *node);
                }
            }
            Edit::CreateTopic { name, type_name, qos } => {
                if name.is_empty() || name.len() > MAX_NAME {
                    return Err(TopicError::NameLength { len: name.len(), max: MAX_NAME });
                }
                if type_name.len() > MAX_TYPE_NAME {
                    return Err(TopicError::TypeNameLength { len: type_name.len(), max: MAX_TYPE_NAME });
                }
                qos.validate_topic().map_err(TopicError::Qos)?;
                match t.topic(name) {
                    Some(old) if old.type_name != *type_name => {
                        return Err(TopicError::TypeMismatch { domain: old.type_name.clone(), here: type_name.clone() })
                    }
                    Some(old) if old.qos != *qos => {
                        return Err(TopicError::QosMismatch { domain: Box::new(old.qos), here: Box::new(*qos) })
                    }
                    Some(_) => return Ok(None),
                    None => t.topics.push(TopicEntry {
                        name: name.clone(),
                        type_name: type_name.clone(),
                        qos: *qos,
                        writers: Vec::new(),
                        readers: Vec::new(),
                    }),
                }
            }
            Edit::AddEndpoint { topic, incarnation, writer, endpoint } => {
                if !t.participants.contains(&(endpoint.node, *incarnation)) {
                    return Err(TopicError::NotListed);
                }
                let Some(entry) = t.topics.iter_mut().find(|x| x.name == *topic) else {
                    return Err(TopicError::NoSuchTopic);
                };
                let list = if *writer { &mut entry.writers } else { &mut entry.readers };
                if list.iter().any(|e| e.node == endpoint.node && e.id == endpoint.id) {
                    return Ok(None);
                }
                list.push(*endpoint);
            }
            Edit::CreateLog { name, qos } => match crate::logs::entry::create(&t.logs, name, qos, MAX_NAME)? {
                None => return Ok(None),
                Some(entry) => t.logs.push(entry),
            },
            Edit::RemoveEndpoint { topic, writer, node, id } => {
                let Some(entry) = t.topics.iter_mut().find(|x| x.name == *topic) else { return Ok(None) };
                let list = if *writer { &mut entry.writers } else { &mut entry.readers };
                let before = list.len();
                list.retain(|e| !(e.node == *node && e.id == *id));
                if list.len() == before {
                    return Ok(None);
                }
            }
        }
        Ok(Some(t))
    }
}

/// The DDS layout: topic subgroups from the view's topic table.
#[derive(Debug, Default)]
pub(crate) struct DdsLayout;

impl Layout for DdsLayout {
    fn subgroups(&self, view: &View) -> Result<Vec<SubgroupSpec>, LayoutError> {
        match TopicTable::decode(view.layout().bytes()) {
            Ok(t) => Ok(t.subgroups(view).into_iter().map(|(_, s)| s).collect()),
            Err(why) => {
                // Only a leader's edit makes a document, so this is a bug, not input.
                tracing::error!(%why, view = view.id().0, "undecodable topic table: no subgroups");
                Ok(Vec::new())
            }
        }
    }

    fn edit(&self, doc: &[u8], edit: &[u8]) -> Result<Option<Vec<u8>>, EditError> {
        let table = TopicTable::decode(doc).map_err(|e| EditError::Invalid(e.to_string()))?;
        let edit = match postcard::take_from_bytes::<Edit>(edit) {
            Ok((e, [])) => e,
            Ok(_) => return Err(EditError::Invalid("bytes after the edit".into())),
            Err(e) => return Err(EditError::Invalid(format!("edit: {e}"))),
        };
        // The group's layout interface carries text; the participant that asked
        // finds the typed cause by applying the edit itself.
        table.apply(&edit).map(|t| t.map(|t| t.encode())).map_err(|e| EditError::Invalid(e.to_string()))
    }

    fn successor(&self, old: &View, k: usize, new: &View) -> Option<usize> {
        let (a, b) = (TopicTable::decode(old.layout().bytes()).ok()?, TopicTable::decode(new.layout().bytes()).ok()?);
        let (i, _) = a.subgroups(old).into_iter().nth(k)?;
        b.subgroup_of(&a.topics[i].name, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qos::QosError;
    use spindle_views::view::LayoutDoc;

    fn view(n: u32, t: &TopicTable) -> View {
        View::initial((0..n).map(NodeId).collect()).with_layout(LayoutDoc::new(1, t.encode()))
    }

    fn ep(node: u32, level: Level) -> Endpoint {
        Endpoint { node, id: 0, level }
    }

    #[test]
    fn topics_map_to_subgroups_of_their_endpoints() {
        let l = DdsLayout;
        let mut doc = Vec::new();
        let edits = [
            Edit::Hello { node: 1, incarnation: 7 },
            Edit::Hello { node: 2, incarnation: 8 },
            Edit::CreateTopic { name: "a".into(), type_name: "u64".into(), qos: Qos::default() },
            Edit::CreateTopic { name: "b".into(), type_name: "u64".into(), qos: Qos::unordered() },
            Edit::AddEndpoint { topic: "b".into(), incarnation: 7, writer: true, endpoint: ep(1, Level::Unordered) },
            Edit::AddEndpoint { topic: "b".into(), incarnation: 8, writer: false, endpoint: ep(2, Level::Ordered) },
            Edit::AddEndpoint { topic: "a".into(), incarnation: 8, writer: false, endpoint: ep(2, Level::Ordered) },
        ];
        for e in &edits {
            doc = l.edit(&doc, &e.encode()).unwrap().expect("each edit changes the table");
        }
        for e in &edits {
            assert_eq!(l.edit(&doc, &e.encode()).unwrap(), None, "edits are idempotent");
        }
        let t = TopicTable::decode(&doc).unwrap();
        let v = view(3, &t);
        let specs = l.subgroups(&v).unwrap();
        assert_eq!(specs.len(), 1, "topic a has no writer, so no subgroup");
        assert_eq!(specs[0].members, vec![NodeId(1), NodeId(2)]);
        assert_eq!(specs[0].senders, vec![NodeId(1)]);
        assert_eq!(specs[0].mode, Mode::Unordered);
        // A writer on `a` makes it subgroup 0 and moves `b` to 1.
        let add =
            Edit::AddEndpoint { topic: "a".into(), incarnation: 7, writer: true, endpoint: ep(1, Level::Ordered) };
        let doc2 = l.edit(&doc, &add.encode()).unwrap().unwrap();
        let v2 = View::initial((0..3).map(NodeId).collect()).with_layout(LayoutDoc::new(2, doc2));
        assert_eq!(l.successor(&v, 0, &v2), Some(1));
        // A restarted node 1 (new incarnation) loses its old endpoints.
        let t3 = TopicTable::decode(v2.layout().bytes()).unwrap().apply(&Edit::Hello { node: 1, incarnation: 9 });
        assert!(t3.unwrap().unwrap().topics.iter().all(|t| t.writers.is_empty()));
    }

    #[test]
    fn bad_edits_are_errors() {
        let l = DdsLayout;
        let create = |ty: &str, qos| Edit::CreateTopic { name: "t".into(), type_name: ty.into(), qos };
        let doc = l.edit(&[], &create("u64", Qos::default()).encode()).unwrap().unwrap();
        let table = TopicTable::decode(&doc).unwrap();
        let other = TopicError::TypeMismatch { domain: "u64".into(), here: "String".into() };
        assert_eq!(table.apply(&create("String", Qos::default())), Err(other.clone()));
        // The group's layout interface carries the same cause as text.
        let e = l.edit(&doc, &create("String", Qos::default()).encode()).unwrap_err();
        assert_eq!(e.to_string(), EditError::Invalid(other.to_string()).to_string());
        let unordered = table.apply(&create("u64", Qos::unordered()));
        assert!(matches!(unordered, Err(TopicError::QosMismatch { .. })), "{unordered:?}");
        assert!(l.edit(&doc, b"\xff\xff\xff").is_err(), "garbage");
        assert!(l.edit(b"\xff", &create("u64", Qos::default()).encode()).is_err(), "a garbage document");
        let stranger =
            Edit::AddEndpoint { topic: "t".into(), incarnation: 1, writer: true, endpoint: ep(5, Level::Ordered) };
        assert_eq!(table.apply(&stranger), Err(TopicError::NotListed), "no such participant");
        let long = Edit::CreateTopic { name: "x".repeat(MAX_NAME + 1), type_name: "u8".into(), qos: Qos::default() };
        assert_eq!(table.apply(&long), Err(TopicError::NameLength { len: MAX_NAME + 1, max: MAX_NAME }));
        let big = Qos::default().max_sample_bytes(u32::MAX);
        let big = table.apply(&Edit::CreateTopic { name: "y".into(), type_name: "u8".into(), qos: big });
        assert!(matches!(big, Err(TopicError::Qos(QosError::MaxSampleBytes { .. }))), "{big:?}");
    }
}
