//! The `hello` example as its docs say: started twice, the second joins the first's
//! domain, and each prints both greetings (its own and the other's) and ends.

use std::process::Command;
use std::time::Duration;
use testkit::LineChild;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn two_hellos_greet_each_other() {
    let name = format!("hello{}", std::process::id());
    let start = || {
        let mut c = Command::new(testkit::example_binary("hello"));
        c.arg(&name);
        LineChild::start(c)
    };
    let mut a = start();
    // The first founds the domain before the second looks for it.
    a.expect("that it is in the domain", WAIT, |l| l.contains(" is in domain "));
    let mut b = start();
    let greetings = |h: &mut LineChild| {
        while h.seen.iter().filter(|l| l.starts_with("hello from ")).count() < 2 {
            h.expect("a second greeting", WAIT, |l| l.starts_with("hello from "));
        }
        let mut g: Vec<String> = h.seen.iter().filter(|l| l.starts_with("hello from ")).cloned().collect();
        g.sort();
        g
    };
    let (ga, gb) = (greetings(&mut a), greetings(&mut b));
    assert_eq!(ga, gb, "both print the same two greetings");
    assert_ne!(ga[0], ga[1], "from two participants");
    assert!(a.finish(WAIT) && b.finish(WAIT), "both end by themselves, with success");
}
