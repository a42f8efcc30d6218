//! Node routes accept a node only as itself (docs/security.md): in mTLS mode the client
//! certificate must be one the fleet CA issued to a node, name the body's `node_id`, and be the
//! node's current certificate (the serial its record holds), so a replaced certificate, or
//! one of a node that was unenrolled, is refused. In `--plain-http` mode anyone is anyone, as
//! PPN has it.

use fleetwire_types::CertSerial;

use crate::fleet_identity::PeerIdentity;

/// Who sent a node-scoped request.
#[derive(Debug, Clone, Copy)]
pub enum NodeCaller<'a> {
    /// `--plain-http`: nobody is authenticated, everybody is taken at their word.
    Unchecked,
    /// mTLS: what the connection's client certificate names, if anything.
    Presented(Option<&'a PeerIdentity>),
}

/// Why a node-scoped request was refused; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeIdentityError {
    /// No node certificate of this fleet on the connection.
    #[error("this route takes a node only with its certificate from this fleet's CA: none was presented")]
    NoCertificate,
    /// The certificate names another node.
    #[error("the client certificate is node {presented:?}'s; it cannot act for node {claimed:?}")]
    OtherNode { presented: String, claimed: String },
    /// The certificate is the node's, but not its current one (replaced at a renewal), or the
    /// node is no longer enrolled.
    #[error("the client certificate (serial {presented}) is not node {node_id:?}'s current certificate; the node enrolls again with a new bootstrap token")]
    NotCurrent { node_id: String, presented: String },
}

/// The node a request may act for: `Ok(None)` when unchecked, `Ok(Some(serial))` with the
/// presented certificate's serial when the certificate names `claimed`.
pub fn claim<'a>(
    caller: NodeCaller<'a>,
    claimed: &str,
) -> Result<Option<&'a str>, NodeIdentityError> {
    match caller {
        NodeCaller::Unchecked => Ok(None),
        NodeCaller::Presented(Some(PeerIdentity::Node {
            node_id,
            serial_hex,
        })) => {
            if node_id == claimed {
                Ok(Some(serial_hex.as_str()))
            } else {
                Err(NodeIdentityError::OtherNode {
                    presented: node_id.clone(),
                    claimed: claimed.to_string(),
                })
            }
        }
        NodeCaller::Presented(_) => Err(NodeIdentityError::NoCertificate),
    }
}

/// Which of the node's certificates was presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presented {
    /// The one its record holds.
    Current,
    /// The one its last renewal replaced, taken until the new one is first presented.
    Replaced,
}

/// Whether `presented` is the certificate `recorded` for `node_id`, or the one its last
/// renewal `replaced` (none recorded: the node holds no certificate of this CA, so nothing
/// presented is current).
pub fn current(
    node_id: &str,
    presented: &str,
    recorded: Option<&CertSerial>,
    replaced: Option<&CertSerial>,
) -> Result<Presented, NodeIdentityError> {
    if recorded.is_some_and(|serial| serial.as_str() == presented) {
        Ok(Presented::Current)
    } else if replaced.is_some_and(|serial| serial.as_str() == presented) {
        Ok(Presented::Replaced)
    } else {
        Err(NodeIdentityError::NotCurrent {
            node_id: node_id.to_string(),
            presented: presented.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, serial: &str) -> PeerIdentity {
        PeerIdentity::Node {
            node_id: id.into(),
            serial_hex: serial.into(),
        }
    }

    #[test]
    fn a_node_acts_only_for_itself() {
        let a = node("a", "1f");
        assert_eq!(claim(NodeCaller::Presented(Some(&a)), "a"), Ok(Some("1f")));
        assert!(matches!(
            claim(NodeCaller::Presented(Some(&a)), "b"),
            Err(NodeIdentityError::OtherNode { .. })
        ));
        assert_eq!(
            claim(NodeCaller::Presented(Some(&PeerIdentity::Controller)), "a"),
            Err(NodeIdentityError::NoCertificate)
        );
        assert_eq!(
            claim(NodeCaller::Presented(None), "a"),
            Err(NodeIdentityError::NoCertificate)
        );
        assert_eq!(claim(NodeCaller::Unchecked, "b"), Ok(None));
    }

    #[test]
    fn only_the_recorded_certificate_and_the_one_it_replaced_are_taken() {
        let recorded = CertSerial::try_from("1f").unwrap();
        let replaced = CertSerial::try_from("0e").unwrap();
        assert_eq!(
            current("a", "1f", Some(&recorded), None),
            Ok(Presented::Current)
        );
        assert_eq!(
            current("a", "0e", Some(&recorded), Some(&replaced)),
            Ok(Presented::Replaced)
        );
        assert!(current("a", "0e", Some(&recorded), None).is_err());
        assert!(current("a", "20", Some(&recorded), Some(&replaced)).is_err());
        assert!(current("a", "1f", None, None).is_err());
    }
}
