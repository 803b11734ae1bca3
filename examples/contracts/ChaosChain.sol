// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// @title ChaosChain — the on-chain side of the example workflows.
/// @notice Per studio and epoch: work is submitted once per data hash, each scorer
///         scores a piece of work once, and an epoch is closed once. Every write is
///         a natural idempotency check: a second attempt reverts with a stable reason
///         ("already submitted", "epoch closed", "unknown work") that a workflow's
///         reconciler can act on.
contract ChaosChain {
    struct Work {
        address submitter;
        string evidenceId;
    }

    mapping(address => mapping(uint64 => mapping(bytes32 => Work))) private _work;
    mapping(address => mapping(uint64 => mapping(bytes32 => mapping(address => uint8)))) private _scores;
    mapping(address => mapping(uint64 => mapping(bytes32 => mapping(address => bool)))) private _scored;
    mapping(address => mapping(uint64 => bool)) private _closed;

    event WorkSubmitted(
        address indexed studio,
        uint64 indexed epoch,
        bytes32 indexed dataHash,
        address submitter,
        string evidenceId
    );
    event ScoreSubmitted(
        address indexed studio,
        uint64 indexed epoch,
        bytes32 indexed dataHash,
        address scorer,
        uint8 score
    );
    event EpochClosed(address indexed studio, uint64 indexed epoch, address closedBy);

    // "already submitted" is checked before "epoch closed" on purpose: a retry of a write
    // that did land must read as done (reconcile to COMPLETED), even after the epoch closed.
    function submitWork(address studio, uint64 epoch, bytes32 dataHash, string calldata evidenceId)
        external
    {
        Work storage w = _work[studio][epoch][dataHash];
        require(w.submitter == address(0), "already submitted");
        require(!_closed[studio][epoch], "epoch closed");
        w.submitter = msg.sender;
        w.evidenceId = evidenceId;
        emit WorkSubmitted(studio, epoch, dataHash, msg.sender, evidenceId);
    }

    function submitScore(address studio, uint64 epoch, bytes32 dataHash, uint8 score) external {
        require(!_scored[studio][epoch][dataHash][msg.sender], "already submitted");
        require(!_closed[studio][epoch], "epoch closed");
        require(_work[studio][epoch][dataHash].submitter != address(0), "unknown work");
        _scored[studio][epoch][dataHash][msg.sender] = true;
        _scores[studio][epoch][dataHash][msg.sender] = score;
        emit ScoreSubmitted(studio, epoch, dataHash, msg.sender, score);
    }

    function closeEpoch(address studio, uint64 epoch) external {
        require(!_closed[studio][epoch], "epoch closed");
        _closed[studio][epoch] = true;
        emit EpochClosed(studio, epoch, msg.sender);
    }

    function workSubmitted(address studio, uint64 epoch, bytes32 dataHash) external view returns (bool) {
        return _work[studio][epoch][dataHash].submitter != address(0);
    }

    function workEvidence(address studio, uint64 epoch, bytes32 dataHash)
        external
        view
        returns (address submitter, string memory evidenceId)
    {
        Work storage w = _work[studio][epoch][dataHash];
        return (w.submitter, w.evidenceId);
    }

    function scoreSubmitted(address studio, uint64 epoch, bytes32 dataHash, address scorer)
        external
        view
        returns (bool)
    {
        return _scored[studio][epoch][dataHash][scorer];
    }

    function scoreOf(address studio, uint64 epoch, bytes32 dataHash, address scorer)
        external
        view
        returns (uint8)
    {
        return _scores[studio][epoch][dataHash][scorer];
    }

    function epochClosed(address studio, uint64 epoch) external view returns (bool) {
        return _closed[studio][epoch];
    }
}
