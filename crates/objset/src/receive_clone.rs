//! `cairn receive [-o origin=POOL/DS@SNAP] POOL/NEW`: an incremental received as a new
//! clone of the snapshot it starts from (`send -i DS@O CLONE@S`, `crate::clone_send`).
//!
//! The stream names the sender's clone objects; its CLONE_IDS records pair each with the
//! sender's origin object it was copied from. Here that origin object is known through
//! the receive map of our copy of the origin (as of that snapshot), and our clone of it
//! has a clone map of its own:
//! ```text
//!  sender's clone id ─CLONE_IDS─▶ sender's origin id ─receive map of DS@SNAP─▶ our origin
//!  id ─our clone map─▶ our clone id          (the new dataset's receive map: first → last)
//! ```
//! An ordinary incremental (no CLONE_IDS) received with `-o origin=` names the origin's
//! objects themselves: the map starts as the last three steps.
//!
//! The origin is the one snapshot of the pool whose guid is the stream's from-guid; a
//! named origin with another guid is refused before anything is made. The new clone is
//! destroyed if the stream fails (the receive's all-or-nothing undo).

use std::collections::HashMap;

use crate::codec::Reader;
use crate::core::StoreCore;
use crate::error::StoreError;
use crate::id_map::IdMap;
use crate::receive::{refuse_partial, ReceiveOptions, Receiving, Undo, RESUME_TOKEN_PROP};
use crate::stream::{bad, Header};

impl StoreCore {
    /// Makes `name` a clone of the stream's origin, with the sender's ids mapped.
    pub(crate) fn start_clone(
        &self,
        name: &str,
        h: &Header,
        opts: &ReceiveOptions,
        undo: &mut Vec<Undo>,
    ) -> Result<Receiving, StoreError> {
        if let Some(ds) = self.datasets().by_name(name) {
            refuse_partial(ds)?;
            return Err(StoreError::DatasetExists(format!(
                "{name} (a stream from a clone's origin makes a new clone: name a dataset that does not exist)"
            )));
        }
        let origin = self.stream_origin(h, opts.origin.as_deref())?;
        let view = self.snapshot_view(&origin)?;
        let ods = self
            .datasets()
            .by_id(view.dataset)
            .cloned()
            .expect("a view names its dataset");
        let received = self.load_receive_map(&ods, Some(&view))?;
        self.clone_create(&origin, name)?;
        undo.push(Undo::Destroy(name.to_string()));
        self.take_stream_props(name, h)?;
        let ds = self
            .datasets()
            .by_name(name)
            .cloned()
            .expect("just created");
        let cloned = self.load_clone_map(ds.id)?;
        let origin_ids: HashMap<u64, u64> = received
            .ids
            .iter()
            .filter_map(|(&src, ours)| cloned.get(ours).map(|&c| (src, c)))
            .collect();
        let ids = if h.clone {
            HashMap::new()
        } else {
            origin_ids.clone()
        };
        let map = IdMap {
            ids,
            xattr_links: Vec::new(),
        };
        let mut rx = Receiving::new(&ds, h.root, map);
        rx.origin_ids = h.clone.then_some(origin_ids);
        Ok(rx)
    }

    /// The sender's properties of the clone, as a full stream's dataset gets them (the
    /// volume's size and block size are the origin's, kept by the clone).
    fn take_stream_props(&self, name: &str, h: &Header) -> Result<(), StoreError> {
        let keep = |k: &str| {
            !crate::dataset::is_internal_property(k)
                && k != RESUME_TOKEN_PROP
                && k != "volsize"
                && k != "volblocksize"
        };
        for (k, v) in h.props.iter().filter(|(k, _)| keep(k)) {
            self.set_property(name, k, v)?;
        }
        Ok(())
    }

    /// The full name of the snapshot the stream starts from: `given` if its guid is the
    /// stream's, else the pool's snapshot with that guid.
    fn stream_origin(&self, h: &Header, given: Option<&str>) -> Result<String, StoreError> {
        let table = self.datasets();
        if let Some(o) = given {
            let v = self.snapshot_view(o)?;
            let guid = table
                .snapshots
                .find(v.dataset, &v.snapshot)
                .map_or(0, |r| r.guid);
            if guid != h.from_guid {
                return Err(StoreError::NotPermitted(format!(
                    "{o} is not the snapshot this stream starts from (the stream's origin has guid {:016x}, {o} {guid:016x}); name the snapshot this pool received from the sender's origin, or leave out -o origin= to find it by guid",
                    h.from_guid
                )));
            }
            return Ok(o.to_string());
        }
        table
            .datasets
            .iter()
            .find_map(|d| {
                let r = table.snapshots.of(d.id).find(|r| r.guid == h.from_guid)?;
                Some(format!("{}@{}", d.name, r.name))
            })
            .ok_or_else(|| {
                StoreError::NotFound(format!(
                    "the snapshot this stream starts from (guid {:016x}) in this pool: receive the clone's origin first (a full stream of it), or name it with -o origin=POOL/DS@SNAP",
                    h.from_guid
                ))
            })
    }

    /// A CLONE_IDS record: the sender's clone objects, mapped to ours through the origin.
    pub(crate) fn receive_clone_ids(rx: &mut Receiving, p: &[u8]) -> Result<(), StoreError> {
        let e = |x: crate::codec::DecodeError| bad(x.to_string());
        let mut r = Reader::new(p, "stream clone ids record");
        let n = r.count(16).map_err(e)?;
        for _ in 0..n {
            let (ours_src, origin_src) = (r.u64().map_err(e)?, r.u64().map_err(e)?);
            let id = match &rx.origin_ids {
                Some(m) => m.get(&origin_src).copied().ok_or_else(|| {
                    bad(format!(
                        "object {origin_src} of the origin is not in this pool's copy of it"
                    ))
                })?,
                // A resumed stream sends them again: the saved map has them already.
                None => match rx.map.get(&ours_src) {
                    Some(&id) => id,
                    None => return Err(bad("clone ids for a dataset not received as a clone")),
                },
            };
            rx.map.insert(ours_src, id);
        }
        if !r.is_at_end() {
            return Err(bad("a clone ids record with bytes after its pairs"));
        }
        Ok(())
    }
}
