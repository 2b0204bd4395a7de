//! Issue 16 (directory trees): one directory of a source tree listed with each entry's kind,
//! against the real servers: MLSD on proFTPD and Pure-FTPd, LIST in the `ls -l` format on
//! vsftpd (which has no MLSD), so that a walk can tell files, directories, symbolic links and
//! special files apart on each. Names with spaces and UTF-8, an empty directory and a link.

use bftp_ftp::{TreeKind, WalkMethod};
use bftp_tests::{FtpOptions, FtpServer, ServerKind};

use crate::engine::{block_on, image, open};

fn tree_on(kind: ServerKind) -> (FtpServer, FtpServer) {
    let src = FtpServer::start(kind, FtpOptions::default()).unwrap();
    src.put_file("top/a b.dat", b"12345").unwrap();
    src.put_file("top/\u{fc}ber.dat", b"x").unwrap();
    src.put_file("top/sub dir/deep.dat", b"deep").unwrap();
    src.mkdir("top/empty").unwrap();
    std::os::unix::fs::symlink("a b.dat", src.path("top/link")).unwrap();
    let dst = FtpServer::start(ServerKind::Vsftpd, FtpOptions::default()).unwrap();
    (src, dst)
}

#[test]
fn each_server_lists_a_directory_with_the_kind_of_each_entry() {
    for kind in [
        ServerKind::Vsftpd,
        ServerKind::Proftpd,
        ServerKind::PureFtpd,
    ] {
        let (src, dst) = tree_on(kind);
        let listing = block_on(async {
            let mut pair = open(&src, &dst, image()).await.unwrap();
            pair.list_dir("top").await.unwrap()
        });
        let want_method = if kind == ServerKind::Vsftpd {
            WalkMethod::List
        } else {
            WalkMethod::Mlsd
        };
        assert_eq!(listing.method, want_method, "{kind}");
        assert!(listing.rejected.is_empty(), "{kind}: {listing:#?}");
        let of = |name: &str| {
            listing
                .entries
                .iter()
                .find(|e| e.name == name)
                .unwrap_or_else(|| panic!("{kind}: no {name:?} in {listing:#?}"))
        };
        assert_eq!(of("a b.dat").kind, TreeKind::File, "{kind}");
        assert_eq!(of("a b.dat").size, Some(5), "{kind}");
        assert_eq!(of("\u{fc}ber.dat").kind, TreeKind::File, "{kind}");
        assert_eq!(of("sub dir").kind, TreeKind::Dir, "{kind}");
        assert_eq!(of("empty").kind, TreeKind::Dir, "{kind}");
        // Reported as a link, never as the file it points to. vsftpd's LIST names the target;
        // proFTPD's MLSD (`OS.unix=symlink`) and Pure-FTPd's (`OS.unix=slink:`) do not.
        let target = if kind == ServerKind::Vsftpd {
            "a b.dat"
        } else {
            ""
        };
        assert_eq!(
            of("link").kind,
            TreeKind::Symlink {
                target: target.into()
            },
            "{kind}"
        );
        assert_eq!(listing.entries.len(), 5, "{kind}: {listing:#?}");
    }
}
