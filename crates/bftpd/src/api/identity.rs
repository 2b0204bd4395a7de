//! Who is calling: the Unix user on the other end of the socket (SO_PEERCRED), and whether
//! that user may act on every job (RULES.md §8).

use anyhow::Context;
use nix::unistd::{Gid, Group, Uid, User};

/// The caller of one API connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub admin: bool,
}

impl Caller {
    /// Whether this caller may see and cancel a job owned by `owner`.
    pub fn may_access(&self, owner: u32) -> bool {
        self.admin || self.uid == owner
    }
}

/// Decides admin rights: root, or a member (primary or supplementary) of the admin group.
#[derive(Debug, Clone)]
pub struct AdminPolicy {
    admin_gid: Option<Gid>,
}

impl AdminPolicy {
    pub fn new(admin_group: Option<&str>) -> anyhow::Result<AdminPolicy> {
        let admin_gid = match admin_group {
            None => None,
            Some(name) => {
                let g = Group::from_name(name)
                    .with_context(|| format!("cannot look up admin_group {name:?}"))?
                    .with_context(|| format!("admin_group {name:?} does not exist"))?;
                Some(g.gid)
            }
        };
        Ok(AdminPolicy { admin_gid })
    }

    pub fn caller(&self, uid: u32, gid: u32) -> Caller {
        Caller {
            uid,
            admin: uid == 0 || self.in_admin_group(uid, gid),
        }
    }

    fn in_admin_group(&self, uid: u32, gid: u32) -> bool {
        let Some(admin) = self.admin_gid else {
            return false;
        };
        if Gid::from_raw(gid) == admin {
            return true;
        }
        // The peer's supplementary groups are not in SO_PEERCRED: ask the group database.
        match User::from_uid(Uid::from_raw(uid)) {
            Ok(Some(user)) => {
                let Ok(name) = std::ffi::CString::new(user.name.as_bytes()) else {
                    return false;
                };
                nix::unistd::getgrouplist(&name, user.gid)
                    .map(|gs| gs.contains(&admin))
                    .unwrap_or(false)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_admin_and_others_only_see_their_own() {
        let p = AdminPolicy::new(None).unwrap();
        let root = p.caller(0, 0);
        assert!(root.admin && root.may_access(1234));
        let alice = p.caller(1000, 1000);
        assert!(!alice.admin);
        assert!(alice.may_access(1000));
        assert!(!alice.may_access(1001));
    }

    #[test]
    fn admin_group_by_primary_gid() {
        // Group 0 ("root") exists everywhere.
        let p = AdminPolicy::new(Some("root")).unwrap();
        assert!(p.caller(4242, 0).admin);
        assert!(!p.caller(4242, 4242).admin);
    }

    #[test]
    fn missing_admin_group_is_a_startup_error() {
        let e = AdminPolicy::new(Some("no-such-group-bftp")).unwrap_err();
        assert!(format!("{e:#}").contains("does not exist"));
    }
}
