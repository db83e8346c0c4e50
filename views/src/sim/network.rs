//! The simulated network: a queue of writes per directed link, applied in order,
//! each landing only in the view it was posted in.

use super::GroupSim;
use spindle_sst::Pushes;
use std::collections::VecDeque;

/// One posted write in flight.
#[derive(Debug)]
pub(super) struct Write {
    view: u64,
    region: usize,
    offset: usize,
    pub(super) words: Vec<u64>,
}

/// The writes in flight from one node to another.
#[derive(Debug, Default)]
pub(super) struct Link {
    pub(super) queue: VecDeque<Write>,
    pub(super) cut: bool,
}

impl GroupSim {
    /// Copies each push out of `from`'s region onto the links to its targets.
    pub(super) fn post(&mut self, from: usize, pushes: &mut Pushes) {
        let vid = self.nodes[from].view().id().0;
        for p in pushes.drain() {
            let mut words = vec![0u64; p.len / 8];
            let region = p.region.0 as usize;
            self.nodes[from].regions[region].read_words(p.offset, &mut words);
            for t in p.targets() {
                let to = t.0 as usize;
                if to == from || self.links[from][to].cut || !self.nodes[from].linked[to] {
                    continue; // cut off, or no link made at this view's setup
                }
                self.links[from][to].queue.push_back(Write {
                    view: vid,
                    region,
                    offset: p.offset,
                    words: words.clone(),
                });
            }
        }
    }

    /// Applies the oldest write on `from -> to` if it can land now.
    pub(super) fn deliver_one(&mut self, from: usize, to: usize) -> bool {
        let target = self.nodes[to].view().id().0;
        let link = &mut self.links[from][to];
        let Some(w) = link.queue.front() else { return false };
        if !self.nodes[to].active() {
            link.queue.clear();
            return false;
        }
        if w.view > target {
            return false; // waits until `to` installs that view
        }
        let w = link.queue.pop_front().expect("front exists");
        if w.view == target {
            self.nodes[to].regions[w.region].apply_write(w.offset, &w.words);
        }
        true
    }

    pub(super) fn deliverable_links(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (f, row) in self.links.iter().enumerate() {
            for (t, l) in row.iter().enumerate() {
                if let Some(w) = l.queue.front() {
                    if !self.nodes[t].active() || w.view <= self.nodes[t].view().id().0 {
                        out.push((f, t));
                    }
                }
            }
        }
        out
    }
}
