//! The graph IR and its builder. Values are typed edges; nodes apply an op to values and
//! define new ones; blocks hold nodes in order. Block 0 is the graph's body (its arguments are
//! the graph inputs); control-flow nodes own further blocks, which may use values of the
//! blocks around them.

use std::collections::HashMap;

use crate::attrs::Attr;
use crate::error::{GraphError, Result};
use crate::ops::{self, Op, OpKind};
use crate::types::Type;

pub type ValueId = usize;
pub type NodeId = usize;
pub type BlockId = usize;

#[derive(Clone, Debug, PartialEq)]
pub enum Def {
    Arg { block: BlockId, index: usize },
    Node { node: NodeId, index: usize },
}

#[derive(Clone, Debug)]
pub struct ValueInfo {
    pub ty: Type,
    pub def: Def,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Blocks this node owns (cond: then, else; while_loop: predicate, body).
    pub blocks: Vec<BlockId>,
    pub parent: BlockId,
}

#[derive(Clone, Debug, Default)]
pub struct Block {
    pub args: Vec<ValueId>,
    pub nodes: Vec<NodeId>,
    /// Set when the block is closed (for block 0: the graph outputs).
    pub results: Option<Vec<ValueId>>,
    /// The block this one is nested in (None for the body).
    pub outer: Option<BlockId>,
}

#[derive(Clone, Debug)]
pub struct Graph {
    pub name: String,
    pub values: Vec<ValueInfo>,
    pub nodes: Vec<Node>,
    pub blocks: Vec<Block>,
    /// Blocks being built, innermost last; new nodes go to the last one.
    open: Vec<BlockId>,
}

impl Graph {
    pub fn new(name: &str) -> Graph {
        Graph {
            name: name.to_string(),
            values: Vec::new(),
            nodes: Vec::new(),
            blocks: vec![Block::default()],
            open: vec![0],
        }
    }

    pub fn ty(&self, v: ValueId) -> Option<&Type> {
        self.values.get(v).map(|i| &i.ty)
    }

    pub fn inputs(&self) -> &[ValueId] {
        &self.blocks[0].args
    }

    pub fn outputs(&self) -> Option<&[ValueId]> {
        self.blocks[0].results.as_deref()
    }

    fn current(&self) -> BlockId {
        *self.open.last().unwrap_or(&0)
    }

    fn new_value(&mut self, ty: Type, def: Def) -> ValueId {
        self.values.push(ValueInfo { ty, def });
        self.values.len() - 1
    }

    /// Adds an argument to the graph body (a graph input).
    pub fn add_input(&mut self, ty: Type) -> ValueId {
        let index = self.blocks[0].args.len();
        let v = self.new_value(ty, Def::Arg { block: 0, index });
        self.blocks[0].args.push(v);
        v
    }

    /// The block a value is defined in.
    pub fn block_of(&self, v: ValueId) -> BlockId {
        match self.values[v].def {
            Def::Arg { block, .. } => block,
            Def::Node { node, .. } => self.nodes[node].parent,
        }
    }

    /// Whether `v` may be used inside block `b` (defined there or in a block around it).
    pub fn visible(&self, v: ValueId, b: BlockId) -> bool {
        let home = self.block_of(v);
        let mut cur = Some(b);
        while let Some(blk) = cur {
            if blk == home {
                return true;
            }
            cur = self.blocks[blk].outer;
        }
        false
    }

    fn check_inputs(&self, kind: OpKind, inputs: &[ValueId]) -> Result<Vec<Type>> {
        let here = self.current();
        inputs
            .iter()
            .map(|&v| {
                if v >= self.values.len() {
                    return Err(GraphError::Value(format!("{}: value %{v} does not exist in graph {}", kind.name(), self.name)));
                }
                if !self.visible(v, here) {
                    return Err(GraphError::Value(format!(
                        "{}: value %{v} belongs to a block that is not visible here (a value from another branch, loop body or graph)",
                        kind.name()
                    )));
                }
                Ok(self.values[v].ty.clone())
            })
            .collect()
    }

    /// Adds a node to the current block after inferring (and so validating) its result types.
    pub fn add_node(&mut self, op: Op, inputs: Vec<ValueId>) -> Result<Vec<ValueId>> {
        self.add_node_with_blocks(op, inputs, Vec::new())
    }

    /// Adds an input-free node (a weight) to the graph body even while a nested block is open,
    /// so its value is visible everywhere, not only in the branch or loop that first used it.
    pub fn add_node_to_body(&mut self, op: Op) -> Result<Vec<ValueId>> {
        let saved = std::mem::replace(&mut self.open, vec![0]);
        let out = self.add_node(op, Vec::new());
        self.open = saved;
        out
    }

    /// As add_node, for control-flow nodes that own closed blocks. The blocks' argument and
    /// result types reach inference as the attributes `block{i}_args` and `block{i}_results`.
    pub fn add_node_with_blocks(
        &mut self,
        mut op: Op,
        inputs: Vec<ValueId>,
        blocks: Vec<BlockId>,
    ) -> Result<Vec<ValueId>> {
        let types = self.check_inputs(op.kind, &inputs)?;
        for (i, &b) in blocks.iter().enumerate() {
            let blk = self
                .blocks
                .get(b)
                .ok_or_else(|| GraphError::Value(format!("{}: block {b} does not exist", op.kind.name())))?;
            let results = blk
                .results
                .clone()
                .ok_or_else(|| GraphError::Value(format!("{}: block {b} is still open", op.kind.name())))?;
            let arg_types = blk.args.iter().map(|v| self.values[*v].ty.clone()).collect();
            let res_types = results.iter().map(|v| self.values[*v].ty.clone()).collect();
            op.attrs.0.insert(format!("block{i}_args"), Attr::Types(arg_types));
            op.attrs.0.insert(format!("block{i}_results"), Attr::Types(res_types));
        }
        let out_types = ops::infer(&op, &types)?;
        let node = self.nodes.len();
        let outputs: Vec<ValueId> = out_types
            .into_iter()
            .enumerate()
            .map(|(index, ty)| self.new_value(ty, Def::Node { node, index }))
            .collect();
        let parent = self.current();
        self.nodes.push(Node { op, inputs, outputs: outputs.clone(), blocks, parent });
        self.blocks[parent].nodes.push(node);
        Ok(outputs)
    }

    /// Starts a nested block with arguments of these types; new nodes go into it.
    pub fn open_block(&mut self, arg_types: Vec<Type>) -> (BlockId, Vec<ValueId>) {
        let id = self.blocks.len();
        self.blocks.push(Block { outer: Some(self.current()), ..Block::default() });
        let args: Vec<ValueId> = arg_types
            .into_iter()
            .enumerate()
            .map(|(index, ty)| self.new_value(ty, Def::Arg { block: id, index }))
            .collect();
        self.blocks[id].args = args.clone();
        self.open.push(id);
        (id, args)
    }

    /// Ends the innermost nested block with these results.
    pub fn close_block(&mut self, results: Vec<ValueId>) -> Result<BlockId> {
        let id = self.current();
        if id == 0 {
            return Err(GraphError::Value("no nested block is open".into()));
        }
        for &v in &results {
            if v >= self.values.len() || !self.visible(v, id) {
                return Err(GraphError::Value(format!("block result %{v} is not visible in the block")));
            }
        }
        self.blocks[id].results = Some(results);
        self.open.pop();
        Ok(id)
    }

    /// Abandons the innermost nested block (after an error while building it). Its nodes stay
    /// in the arena but belong to no node, so nothing reaches them.
    pub fn discard_block(&mut self) {
        if self.open.len() > 1 {
            self.open.pop();
        }
    }

    /// Copies the body of `sub` into the current block (`ops.call`), re-inferring every node.
    /// `args` become its inputs; `bound` maps further values of `sub` (its weights, already
    /// staged here) to values of this graph, and nodes whose results are all bound are skipped;
    /// its `chain_create` nodes become `chain` when given; external constants get `prefix` in
    /// front of their names. Returns the values that `wanted` (values of `sub`) became.
    pub fn inline(
        &mut self,
        sub: &Graph,
        args: &[ValueId],
        bound: &[(ValueId, ValueId)],
        chain: Option<ValueId>,
        prefix: &str,
        wanted: &[ValueId],
    ) -> Result<Vec<ValueId>> {
        if sub.open.len() != 1 {
            return Err(GraphError::Value(format!("call: graph: graph {} still has an open block", sub.name)));
        }
        if args.len() != sub.inputs().len() {
            return Err(GraphError::Value(format!(
                "call: args: graph {} takes {} arguments, got {}",
                sub.name,
                sub.inputs().len(),
                args.len()
            )));
        }
        let mut map = HashMap::new();
        for (i, (&a, &p)) in args.iter().zip(sub.inputs()).enumerate() {
            let want = &sub.values[p].ty;
            match self.ty(a) {
                Some(have) if have == want => map.insert(p, a),
                have => {
                    return Err(GraphError::Value(format!(
                        "call: args[{i}]: graph {} expects {want}, got {}",
                        sub.name,
                        have.map_or("nothing".into(), |t| t.to_string())
                    )));
                }
            };
        }
        map.extend(bound.iter().copied());
        self.inline_block(sub, 0, &mut map, chain, prefix)?;
        wanted.iter().map(|v| mapped(&map, *v, sub)).collect()
    }

    fn inline_block(
        &mut self,
        sub: &Graph,
        b: BlockId,
        map: &mut HashMap<ValueId, ValueId>,
        chain: Option<ValueId>,
        prefix: &str,
    ) -> Result<()> {
        for node in sub.blocks[b].nodes.iter().map(|&n| &sub.nodes[n]) {
            if node.outputs.iter().all(|v| map.contains_key(v)) {
                continue;
            }
            if let (OpKind::ChainCreate, Some(c)) = (node.op.kind, chain) {
                map.insert(node.outputs[0], c);
                continue;
            }
            let inputs = node.inputs.iter().map(|v| mapped(map, *v, sub)).collect::<Result<Vec<_>>>()?;
            let mut blocks = Vec::with_capacity(node.blocks.len());
            for &inner in &node.blocks {
                let (id, args) =
                    self.open_block(sub.blocks[inner].args.iter().map(|v| sub.values[*v].ty.clone()).collect());
                map.extend(sub.blocks[inner].args.iter().copied().zip(args));
                let closed = self.inline_block(sub, inner, map, chain, prefix).and_then(|_| {
                    let results = sub.blocks[inner].results.as_deref().unwrap_or(&[]);
                    let results = results.iter().map(|v| mapped(map, *v, sub)).collect::<Result<Vec<_>>>()?;
                    self.close_block(results)
                });
                if let Err(e) = closed {
                    if self.current() == id {
                        self.discard_block();
                    }
                    return Err(e);
                }
                blocks.push(id);
            }
            let mut op = node.op.clone();
            if let (OpKind::ConstantExternal, Some(Attr::Str(name))) = (op.kind, op.attrs.get("name")) {
                let renamed = Attr::Str(format!("{prefix}{name}"));
                op.attrs.0.insert("name".into(), renamed);
            }
            let outs = self.add_node_with_blocks(op, inputs, blocks)?;
            map.extend(node.outputs.iter().copied().zip(outs));
        }
        Ok(())
    }

    pub fn set_outputs(&mut self, outputs: Vec<ValueId>) -> Result<()> {
        for &v in &outputs {
            if v >= self.values.len() || self.block_of(v) != 0 {
                return Err(GraphError::Value(format!("output %{v} is not a value of the graph body")));
            }
            if matches!(self.values[v].ty, Type::Chain) {
                return Err(GraphError::Type("a chain cannot be a graph output".into()));
            }
        }
        self.blocks[0].results = Some(outputs);
        Ok(())
    }

    /// Re-checks the whole graph: every node's inputs defined before use and visible, every
    /// node's types what inference gives, every block closed, outputs set.
    pub fn verify(&self) -> Result<()> {
        if self.open.len() != 1 {
            return Err(GraphError::Value(format!("graph {}: a nested block is still open", self.name)));
        }
        if self.outputs().is_none() {
            return Err(GraphError::Value(format!("graph {}: no outputs were set (call Graph.output)", self.name)));
        }
        let mut defined = vec![false; self.values.len()];
        self.verify_block(0, &mut defined)
    }

    fn verify_block(&self, b: BlockId, defined: &mut [bool]) -> Result<()> {
        for &a in &self.blocks[b].args {
            defined[a] = true;
        }
        for &n in &self.blocks[b].nodes {
            let node = &self.nodes[n];
            for &v in &node.inputs {
                if !defined[v] || !self.visible(v, b) {
                    return Err(GraphError::Value(format!(
                        "graph {}: {} uses %{v} before it is defined",
                        self.name,
                        node.op.kind.name()
                    )));
                }
            }
            for &inner in &node.blocks {
                self.verify_block(inner, defined)?;
            }
            let types: Vec<Type> = node.inputs.iter().map(|v| self.values[*v].ty.clone()).collect();
            let inferred = ops::infer(&node.op, &types)?;
            let actual: Vec<Type> = node.outputs.iter().map(|v| self.values[*v].ty.clone()).collect();
            if inferred != actual {
                return Err(GraphError::Value(format!(
                    "graph {}: {} result types changed",
                    self.name,
                    node.op.kind.name()
                )));
            }
            for &v in &node.outputs {
                defined[v] = true;
            }
        }
        let results = self.blocks[b]
            .results
            .as_ref()
            .ok_or_else(|| GraphError::Value(format!("graph {}: block {b} is not closed", self.name)))?;
        for &v in results {
            if !defined[v] {
                return Err(GraphError::Value(format!("graph {}: block result %{v} is not defined", self.name)));
            }
        }
        Ok(())
    }

    /// The readable text form (also `str(graph)` in Python).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let args: Vec<String> = self.inputs().iter().map(|v| format!("%{v}: {}", self.values[*v].ty)).collect();
        let outs: Vec<String> = self.outputs().unwrap_or(&[]).iter().map(|v| self.values[*v].ty.to_string()).collect();
        out.push_str(&format!("graph @{}({}) -> ({}) {{\n", self.name, args.join(", "), outs.join(", ")));
        self.print_block(0, 1, &mut out);
        out.push_str("}\n");
        out
    }

    fn print_block(&self, b: BlockId, depth: usize, out: &mut String) {
        let pad = "  ".repeat(depth);
        for &n in &self.blocks[b].nodes {
            let node = &self.nodes[n];
            let lhs: Vec<String> = node.outputs.iter().map(|v| format!("%{v}")).collect();
            let ins: Vec<String> = node.inputs.iter().map(|v| format!("%{v}")).collect();
            let attrs: Vec<String> = node
                .op
                .attrs
                .0
                .iter()
                .filter(|(k, v)| !k.starts_with("block") && **v != Attr::None)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let attrs = if attrs.is_empty() { String::new() } else { format!(" {{{}}}", attrs.join(", ")) };
            let tys: Vec<String> = node.outputs.iter().map(|v| self.values[*v].ty.to_string()).collect();
            let assign = if lhs.is_empty() { String::new() } else { format!("{} = ", lhs.join(", ")) };
            out.push_str(&format!(
                "{pad}{assign}{}({}){attrs} : {}\n",
                node.op.kind.name(),
                ins.join(", "),
                tys.join(", ")
            ));
            for &inner in &node.blocks {
                let args: Vec<String> =
                    self.blocks[inner].args.iter().map(|v| format!("%{v}: {}", self.values[*v].ty)).collect();
                out.push_str(&format!("{pad}  block({}) {{\n", args.join(", ")));
                self.print_block(inner, depth + 2, out);
                out.push_str(&format!("{pad}  }}\n"));
            }
        }
        if let Some(results) = &self.blocks[b].results {
            let rs: Vec<String> = results.iter().map(|v| format!("%{v}")).collect();
            let word = if b == 0 { "output" } else { "yield" };
            out.push_str(&format!("{pad}{word} {}\n", rs.join(", ")));
        }
    }
}

/// The value of the calling graph that value `v` of the inlined graph `sub` became.
fn mapped(map: &HashMap<ValueId, ValueId>, v: ValueId, sub: &Graph) -> Result<ValueId> {
    map.get(&v).copied().ok_or_else(|| {
        GraphError::Value(format!("call: value %{v} of graph {} is used before it is defined", sub.name))
    })
}
