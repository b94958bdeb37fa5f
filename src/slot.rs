//! Cluster hash slots, pure: the slot of a key (CRC16 of its hashtag, as
//! the server computes it) and a set of slots.

/// Hash slots of a cluster.
pub const SLOTS: usize = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the cluster's
/// key hash.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The part of `key` that is hashed: the bytes between the first `{` and
/// the first `}` after it if there are any, else the whole key.
pub fn hashtag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The slot of `key` (`CLUSTER KEYSLOT`).
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hashtag(key)) & (SLOTS as u16 - 1)
}

/// The slot shared by every key that starts with `prefix`, if the prefix
/// alone decides it: it holds a complete, non-empty hashtag (`{user42}:`).
pub fn prefix_slot(prefix: &[u8]) -> Option<u16> {
    let open = prefix.iter().position(|&b| b == b'{')?;
    let len = prefix[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| key_slot(prefix))
}

/// A set of slots (one bit each).
#[derive(Clone, PartialEq, Eq)]
pub struct SlotSet {
    bits: Box<[u64; SLOTS / 64]>,
}

impl std::fmt::Debug for SlotSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlotSet({})", self.ranges_text())
    }
}

impl Default for SlotSet {
    fn default() -> Self {
        SlotSet::new()
    }
}

impl SlotSet {
    pub fn new() -> Self {
        SlotSet {
            bits: Box::new([0; SLOTS / 64]),
        }
    }

    pub fn contains(&self, slot: u16) -> bool {
        let s = usize::from(slot) % SLOTS;
        self.bits[s / 64] & (1 << (s % 64)) != 0
    }

    pub fn insert(&mut self, slot: u16) {
        let s = usize::from(slot) % SLOTS;
        self.bits[s / 64] |= 1 << (s % 64);
    }

    pub fn remove(&mut self, slot: u16) {
        let s = usize::from(slot) % SLOTS;
        self.bits[s / 64] &= !(1 << (s % 64));
    }

    /// Adds `first..=last` (clamped to the slot range).
    pub fn insert_range(&mut self, first: u16, last: u16) {
        for s in first..=last.min(SLOTS as u16 - 1) {
            self.insert(s);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|&w| w == 0)
    }

    pub fn len(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Slots in `self` and not in `other`.
    pub fn minus(&self, other: &SlotSet) -> SlotSet {
        let mut out = self.clone();
        for (a, b) in out.bits.iter_mut().zip(other.bits.iter()) {
            *a &= !b;
        }
        out
    }

    /// Slots in either set.
    pub fn union(&self, other: &SlotSet) -> SlotSet {
        let mut out = self.clone();
        for (a, b) in out.bits.iter_mut().zip(other.bits.iter()) {
            *a |= b;
        }
        out
    }

    /// Whether `key`'s slot is in the set.
    pub fn holds_key(&self, key: &[u8]) -> bool {
        self.contains(key_slot(key))
    }

    /// `0-5460 5462` style text (for logs).
    pub fn ranges_text(&self) -> String {
        let mut out = Vec::new();
        let mut s = 0usize;
        while s < SLOTS {
            if !self.contains(s as u16) {
                s += 1;
                continue;
            }
            let first = s;
            while s + 1 < SLOTS && self.contains(s as u16 + 1) {
                s += 1;
            }
            out.push(if first == s {
                format!("{first}")
            } else {
                format!("{first}-{s}")
            });
            s += 1;
        }
        out.join(" ")
    }
}

/// The slots a `CLUSTER NODES` reply says this node serves: those of the
/// line flagged `myself` (a primary), or of its primary's line (a replica),
/// plus the slots `myself` is importing the old way (`[slot-<-node]`),
/// whose keys `SCAN` shows. `None` if there is no `myself` line.
pub fn served_from_nodes(text: &str) -> Option<SlotSet> {
    slots_from_nodes(text, true)
}

/// The slots a `CLUSTER NODES` reply says this node (a replica: its
/// primary) owns: [`served_from_nodes`] without the slots it imports.
pub fn owned_from_nodes(text: &str) -> Option<SlotSet> {
    slots_from_nodes(text, false)
}

/// Every slot some node of a `CLUSTER NODES` reply owns (unassigned slots,
/// e.g. after `CLUSTER DELSLOTS`, are not in it).
pub fn assigned_from_nodes(text: &str) -> SlotSet {
    let mut set = SlotSet::new();
    for line in text.lines() {
        for field in line.split_ascii_whitespace().skip(8) {
            add_slot_field(&mut set, field, true);
        }
    }
    set
}

fn slots_from_nodes(text: &str, imports: bool) -> Option<SlotSet> {
    let lines: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_ascii_whitespace().collect())
        .filter(|f: &Vec<&str>| f.len() >= 8)
        .collect();
    let me = lines
        .iter()
        .find(|f| f[2].split(',').any(|flag| flag == "myself"))?;
    let replica = me[2]
        .split(',')
        .any(|flag| flag == "slave" || flag == "replica");
    let owner = if replica {
        lines.iter().find(|f| f[0] == me[3])
    } else {
        Some(me)
    };
    let mut set = SlotSet::new();
    if let Some(owner) = owner {
        for field in &owner[8..] {
            add_slot_field(&mut set, field, true);
        }
    }
    if imports && !replica {
        for field in &me[8..] {
            add_slot_field(&mut set, field, false);
        }
    }
    Some(set)
}

/// Adds one slot field of a `CLUSTER NODES` line: `a-b` and `a` when
/// `owned`, `[a-<-node]` (importing) when not.
fn add_slot_field(set: &mut SlotSet, field: &str, owned: bool) {
    if let Some(inner) = field.strip_prefix('[') {
        if !owned {
            if let Some((slot, _)) = inner.split_once("-<-") {
                if let Ok(s) = slot.parse::<u16>() {
                    set.insert(s);
                }
            }
        }
        return;
    }
    if !owned {
        return;
    }
    let (a, b) = field.split_once('-').unwrap_or((field, field));
    if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
        if a <= b {
            set.insert_range(a, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;

    #[test]
    fn assigned_slots_are_every_node_s_but_not_imports_nor_unassigned_ones() {
        let text = "a 127.0.0.1:1@2 myself,master - 0 0 1 connected 0-99 [200-<-b]\n\
                    b 127.0.0.1:3@4 master - 0 0 2 connected 150 300-399\n\
                    c 127.0.0.1:5@6 slave b 0 0 2 connected\n";
        assert_eq!(assigned_from_nodes(text).ranges_text(), "0-99 150 300-399");
    }

    #[rstest]
    // Reference values from `CLUSTER KEYSLOT` on Redis/Valkey.
    #[case(b"foo", 12182)]
    #[case(b"bar", 5061)]
    #[case(b"k1", 12706)]
    #[case(b"123456789", 12739)]
    #[case(b"", 0)]
    #[case(b"{user1000}.following", 3443)]
    #[case(b"{user1000}.followers", 3443)]
    #[case(b"user1000", 3443)]
    // Empty tag: the whole key is hashed.
    #[case(b"foo{}{bar}", 8363)]
    // The tag ends at the first '}' after the first '{'.
    #[case(b"foo{{bar}}zap", 4015)]
    #[case(b"{bar", 4015)]
    #[case(b"foo{bar}{zap}", 5061)]
    fn key_slots(#[case] key: &[u8], #[case] slot: u16) {
        assert_eq!(key_slot(key), slot, "{}", String::from_utf8_lossy(key));
    }

    #[test]
    fn crc16_check_value() {
        // The CRC-16/XMODEM check value.
        assert_eq!(crc16(b"123456789"), 0x31c3);
    }

    #[rstest]
    #[case(b"{user42}:", Some(key_slot(b"user42")))]
    #[case(b"x{user42}", Some(key_slot(b"user42")))]
    #[case(b"{user42", None)]
    #[case(b"{}:", None)]
    #[case(b"user:42:", None)]
    #[case(b"", None)]
    fn prefix_slots(#[case] prefix: &[u8], #[case] want: Option<u16>) {
        assert_eq!(prefix_slot(prefix), want);
    }

    proptest! {
        #[test]
        fn a_deciding_prefix_gives_every_extension_its_slot(
            prefix in proptest::collection::vec(any::<u8>(), 0..12),
            rest in proptest::collection::vec(any::<u8>(), 0..12),
        ) {
            if let Some(slot) = prefix_slot(&prefix) {
                let mut key = prefix.clone();
                key.extend_from_slice(&rest);
                prop_assert_eq!(key_slot(&key), slot);
            }
        }

        #[test]
        fn set_operations_agree_with_a_bool_vector(
            a in proptest::collection::vec(0u16..16384, 0..64),
            b in proptest::collection::vec(0u16..16384, 0..64),
        ) {
            let (mut sa, mut sb) = (SlotSet::new(), SlotSet::new());
            a.iter().for_each(|&s| sa.insert(s));
            b.iter().for_each(|&s| sb.insert(s));
            let minus = sa.minus(&sb);
            let union = sa.union(&sb);
            for s in a.iter().chain(b.iter()).copied() {
                prop_assert_eq!(minus.contains(s), a.contains(&s) && !b.contains(&s));
                prop_assert_eq!(union.contains(s), a.contains(&s) || b.contains(&s));
            }
            let mut dedup = a.clone();
            dedup.sort_unstable();
            dedup.dedup();
            prop_assert_eq!(sa.len(), dedup.len());
        }
    }

    #[test]
    fn ranges_and_text() {
        let mut s = SlotSet::new();
        assert!(s.is_empty());
        s.insert_range(0, 5460);
        s.insert(5462);
        s.insert_range(16380, 20000);
        assert_eq!(s.ranges_text(), "0-5460 5462 16380-16383");
        s.remove(5462);
        assert_eq!(s.len(), 5461 + 4);
    }

    const NODES: &str = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5461-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1] [100->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
";

    #[test]
    fn a_primary_serves_its_slots_and_those_it_imports() {
        let s = served_from_nodes(NODES).unwrap();
        assert_eq!(s.ranges_text(), "0-5461");
        let owned = owned_from_nodes(NODES).unwrap();
        assert_eq!(owned.ranges_text(), "0-5460", "owned: not the import");
    }

    #[test]
    fn a_replica_serves_its_primarys_slots() {
        let text = NODES
            .replace("myself,master", "master")
            .replace(" slave ", " myself,slave ");
        let s = served_from_nodes(&text).unwrap();
        assert_eq!(s.ranges_text(), "0-5460");
        assert_eq!(owned_from_nodes(&text), Some(s));
        assert!(served_from_nodes("garbage").is_none());
        assert!(owned_from_nodes("garbage").is_none());
    }
}
