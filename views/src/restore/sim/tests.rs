use super::*;

#[test]
fn a_few_hundred_seeds_keep_every_invariant() {
    let (mut restarts, mut finished) = (0, 0);
    for seed in 0..300 {
        let r = RestoreSim::run_seed(seed).unwrap_or_else(|v| panic!("{v}"));
        restarts += r.restarts;
        finished += u64::from(RestoreSimConfig::from_seed(seed).clean());
    }
    assert!(restarts > 150, "most seeds restore the view: {restarts} of 300");
    assert!(finished > 150, "most seeds are held to progress: {finished} of 300");
}
