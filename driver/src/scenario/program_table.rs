//! The scenario's program table: declared programs, then those generated
//! for churn contexts, and what the device derives from it per partition.

use gpupm_uapi::sampling::CONFIDENTIAL_BRANCH_CYCLES;

use super::program::{generate, ProgramSpec, GENERATED_PROGRAMS};
use super::spec::Scenario;

impl Scenario {
    /// The program table: the declared programs in file order, then (when
    /// the scenario has churn) [`GENERATED_PROGRAMS`] programs generated
    /// from the seed. `CTX_PROGRAM` reads 1 + an index into it.
    pub fn program_table(&self) -> Vec<ProgramSpec> {
        let mut out = self.programs.clone();
        if !self.churn.is_empty() {
            out.extend((0..GENERATED_PROGRAMS).map(|k| generate(self.seed, k)));
        }
        out
    }

    /// `SAMP_MIN_BRANCH_GAP` of partition slot `slot`: the fewest cycles
    /// between two taken branches of any program a context of the slot's
    /// plain VMs can run (fixed contexts, churn with its generated
    /// programs), and at most [`CONFIDENTIAL_BRANCH_CYCLES`] when a
    /// confidential VM is on the slot (its branch stacks come on that
    /// schedule, and its programs must not show); 0 when none runs a
    /// program.
    pub fn min_branch_gap(&self, slot: u32) -> u64 {
        let table = self.program_table();
        let plain_on_slot = |vm: u32| {
            self.vms
                .iter()
                .any(|v| v.id == vm && v.partition == slot && v.confidential_key.is_none())
        };
        let fixed = self
            .contexts
            .iter()
            .filter(|c| plain_on_slot(c.vm))
            .filter_map(|c| self.profiles.get(c.profile)?.program);
        let churn = self
            .churn
            .iter()
            .filter(|c| plain_on_slot(c.vm))
            .flat_map(|c| {
                let generated = self.programs.len()..table.len();
                c.profiles.iter().flat_map(move |&p| {
                    match self.profiles.get(p).and_then(|p| p.program) {
                        Some(i) => i..i + 1,
                        None => generated.clone(),
                    }
                })
            });
        let confidential = self
            .vms
            .iter()
            .any(|v| v.partition == slot && v.confidential_key.is_some());
        fixed
            .chain(churn)
            .filter_map(|i| table.get(i))
            .map(ProgramSpec::min_branch_gap)
            .chain(confidential.then_some(u64::from(CONFIDENTIAL_BRANCH_CYCLES)))
            .min()
            .unwrap_or(0)
    }

    /// Index in [`Scenario::program_table`] of the program the `serial`-th
    /// churn context with profile `profile` runs.
    pub fn churn_program(&self, profile: usize, serial: u64) -> Option<usize> {
        if let Some(p) = self.profiles.get(profile).and_then(|p| p.program) {
            return Some(p);
        }
        let k = usize::try_from(serial % u64::from(GENERATED_PROGRAMS)).ok()?;
        Some(self.programs.len() + k)
    }
}
